import NIOCore

/// The output path of one connection as a value: everything between "an answer or a push is ready" and "bytes go
/// to the socket or the channel".
///
/// It keeps the bytes owed (``ConnectionOutput``: this tick's frames and the pushes held while the channel's write
/// window is full) and decides, for every event the ``ConnectionHandler`` feeds it, what the handler does with them:
/// - **Coalescing.** Frames of a read batch are appended to one buffer and leave once, at the end of the read
///   (``readEnded()``); frames made outside a read leave once at the end of the tick (``flushRequested()`` asks the
///   handler to schedule that flush once per tick, ``flushDue()`` says what to write then).
/// - **Direct sends.** With a known socket, output goes to it at once (``FlushAction/sendDirectly(_:)``,
///   ``PushRoute/sendDirectly``) while the channel holds none of the connection's output, so bytes leave in order; a
///   push to an idle connection leaves at once, one per loop generation (a burst to one connection gathers).
/// - **Pushes against answers** (SB-5.9-2, SB-5.6-2). While the channel's write window is full, pushes are held
///   here in order (``PushRoute/hold``) and answers, PONGs and GOAWAY pass them; they are released when the window
///   opens (``writabilityChanged(_:)``, ``nextHeldPush(channelWritable:)``).
/// - **Water marks and the hard cap** (SB-5.9-1). ``queueMeasured(channelBufferedBytes:applyingHardCap:)`` stops
///   reading the client's requests above the high-water mark of queued bytes, resumes below the low-water mark,
///   and cuts a client that does not read off past the hard cap.
/// - **Closing.** ``closed()`` hands over the last output; held pushes are dropped (GOAWAY is the last frame).
///
/// The machine does no I/O and reads no clock, so every rule is tested without a channel
/// (`OutboundStateMachineTests`), as postgres-nio's connection state machine is.
struct OutboundStateMachine {
    /// The limits on bytes waiting to leave one connection.
    struct Limits: Equatable {
        /// Reading stops at this many queued bytes.
        var highWaterMark: Int
        /// Reading resumes below this many queued bytes.
        var lowWaterMark: Int
        /// Past this many queued bytes the client is cut off.
        var hardCap: Int
    }

    /// Where the connection is in its event-loop tick, for coalescing.
    enum Tick: Equatable {
        /// Outside a read; no flush scheduled.
        case idle
        /// Handling a read batch: its frames leave together when the read ends. `flushScheduled`: a flush was
        /// scheduled before the read began (it still runs, and finds the output written).
        case reading(flushScheduled: Bool)
        /// Outside a read, with the end-of-tick flush scheduled.
        case flushScheduled
    }

    /// Whether reading is stopped because the client does not take its output (SB-5.9-1).
    enum Backpressure: Equatable {
        case off
        case on
    }

    /// Where a release of held pushes is (a flush inside it may report the channel writable again: the nested
    /// notification only asks the running release for another round, it does not recurse).
    enum Release: Equatable {
        case idle
        case releasing
        case releasingWithAnotherRoundRequested
    }

    /// Which encoding of a push encoded beforehand goes to this connection.
    enum PushEncoding: Equatable {
        /// Plain frames (the session did not agree on compression).
        case plain
        /// The zlib-compressed frame where one was made (the push is over the compression threshold).
        case compressedWhereMade
    }

    /// Whether the connection still produces output.
    enum Phase: Equatable {
        case open
        /// The last output was handed over; nothing more is queued.
        case closed
    }

    /// What a flush writes.
    enum FlushAction: Equatable {
        /// Nothing to write, and no limit to check.
        case none
        /// Nothing to write; held pushes still count against the limits (check the queue).
        case checkQueue
        /// Send these bytes on the socket (what it does not take goes to the channel), then check the queue.
        case sendDirectly(ByteBuffer)
        /// Write these bytes (nil: only what was written to the channel before) to the channel, flush it, then check
        /// the queue.
        case flushChannel(ByteBuffer?)
    }

    /// Where a push goes.
    enum PushRoute: Equatable {
        /// Hold it behind the pushes waiting (``hold(_:)``).
        case hold
        /// Send it on the socket now (the connection has nothing else waiting to leave).
        case sendDirectly
        /// Write the (shared, encoded) push buffer itself to the channel, behind these frames of the tick if any,
        /// and flush at the end of the tick (``flushRequested()``).
        case writeToChannel(after: ByteBuffer?)
        /// Append it to this tick's output.
        case append
    }

    /// What the end-of-tick flush needs to be scheduled.
    enum TickAction: Equatable {
        case none
        /// Schedule the end-of-tick flush (the handler calls ``scheduledFlushStarted()`` when it runs).
        case scheduleFlush
    }

    /// What a measurement of the queued bytes decided.
    enum QueueAction: Equatable {
        case none
        /// Stop reading requests (the high-water mark was reached).
        case stopReading
        /// Read again (the queue went below the low-water mark).
        case resumeReading
        /// The queue passed the hard cap: held pushes were dropped; cut the client off as a slow consumer.
        /// `readsStopped`: this measurement also reached the high-water mark.
        case cutOff(queuedBytes: Int, readsStopped: Bool)
    }

    /// Pushes at least this long are written as the shared encoded buffer rather than copied into the output.
    static let sharedPushMinimumBytes = 512

    let limits: Limits
    /// Whether the handler knows the socket (plain TCP, Unix socket, plain WebSocket): output may then go to it
    /// directly.
    let hasSocket: Bool

    /// This tick's frames and the held pushes.
    private(set) var output = ConnectionOutput()
    private(set) var tick: Tick = .idle
    private(set) var backpressure: Backpressure = .off
    private(set) var release: Release = .idle
    private(set) var phase: Phase = .open
    private(set) var pushEncoding: PushEncoding = .plain
    /// The channel's writability as its last `channelWritabilityChanged` told it (read on every push and flush
    /// without touching the channel object: a fan-out to thousands of connections is bound by cache misses).
    private(set) var channelWritable = true
    /// Flushes handed to the channel whose data it has not all written yet; while any, output goes through the
    /// channel too, behind them.
    private(set) var channelFlushesPending = 0
    /// The loop generation in which a push last went to the socket at once: a second push in the same generation
    /// gathers in the output instead, so a burst to one connection leaves in one write.
    private(set) var directPushGeneration: UInt64 = .max
    /// Pushes being sent now: a push sent directly to a socket whose peer is gone closes the channel inside the
    /// send, and the session must end after it (see ``ConnectionHandler``'s `channelInactive`).
    private(set) var pushesInProgress = 0

    init(limits: Limits, hasSocket: Bool) {
        self.limits = limits
        self.hasSocket = hasSocket
    }

    /// Whether a read batch is being handled.
    var isReading: Bool {
        if case .reading = self.tick { return true }
        return false
    }

    /// Bytes of this tick's frames.
    var pendingBytes: Int { self.output.pendingBytes }

    /// Whether pushes must wait: others wait (their order is kept) or the channel's write window is full.
    var pushesMustWait: Bool { self.output.isHoldingPushes || !self.channelWritable }

    /// Whether output may go to the socket now: the channel holds none of the connection's output (no flush
    /// pending in it, no push held for it) and the connection is open.
    var socketIsFree: Bool {
        self.hasSocket && self.channelFlushesPending == 0 && !self.output.isHoldingPushes && self.phase == .open
    }

    // MARK: coalescing

    /// A read batch (or held input) is being handled: its frames leave when it ends.
    mutating func readStarted() {
        switch self.tick {
        case .idle: self.tick = .reading(flushScheduled: false)
        case .flushScheduled: self.tick = .reading(flushScheduled: true)
        case .reading: break
        }
    }

    /// The read batch ended: the handler flushes now (``flushDue()``).
    mutating func readEnded() {
        if case .reading(let scheduled) = self.tick { self.tick = scheduled ? .flushScheduled : .idle }
    }

    /// Output was added outside a read: the end-of-tick flush is needed, once per tick.
    mutating func flushRequested() -> TickAction {
        guard case .idle = self.tick else { return .none }
        self.tick = .flushScheduled
        return .scheduleFlush
    }

    /// The scheduled end-of-tick flush runs (the handler flushes now, ``flushDue()``).
    mutating func scheduledFlushStarted() {
        switch self.tick {
        case .flushScheduled: self.tick = .idle
        case .reading(flushScheduled: true): self.tick = .reading(flushScheduled: false)
        case .idle, .reading(flushScheduled: false): break
        }
    }

    /// Appends frames to this tick's output in place (`write` gets the buffer as its only reference) and says
    /// whether the end-of-tick flush must be scheduled.
    mutating func append(
        capacity: Int, allocator: ByteBufferAllocator, _ write: (inout ByteBuffer) -> Void
    ) -> TickAction {
        self.output.append(capacity: capacity, allocator: allocator, write)
        return self.flushRequested()
    }

    /// This tick's output moved out for a caller that appends to it in place (see
    /// ``ConnectionOutput/takeForAppending(capacity:allocator:)``); give it back with ``restorePending(_:)``.
    mutating func takeForAppending(capacity: Int, allocator: ByteBufferAllocator) -> ByteBuffer {
        self.output.takeForAppending(capacity: capacity, allocator: allocator)
    }

    /// Gives back what ``takeForAppending(capacity:allocator:)`` took (nil: nothing to keep).
    mutating func restorePending(_ buffer: ByteBuffer?) {
        self.output.restorePending(buffer)
    }

    /// What to write now (at the end of a read, of a tick, or before decoding pauses).
    mutating func flushDue() -> FlushAction {
        if self.output.pendingBytes > 0, let pending = self.output.takePending() {
            if !self.output.writtenUnflushed, self.socketIsFree { return .sendDirectly(pending) }
            self.output.writtenUnflushed = false
            return .flushChannel(pending)
        }
        if self.output.writtenUnflushed {
            self.output.writtenUnflushed = false
            return .flushChannel(nil)
        }
        return self.output.isHoldingPushes ? .checkQueue : .none
    }

    // MARK: pushes

    /// The session agreed on zlib (`WELCOME`'s features): pushes go compressed where a compressed frame was made.
    mutating func compressionAgreed() {
        self.pushEncoding = .compressedWhereMade
    }

    /// The frame of a push encoded beforehand that this connection sends: `compressed` (made when the push is over
    /// the compression threshold) if the session agreed on compression, `plain` otherwise.
    func frame(plain: ByteBuffer, compressed: ByteBuffer?) -> ByteBuffer {
        switch self.pushEncoding {
        case .plain: return plain
        case .compressedWhereMade: return compressed ?? plain
        }
    }

    /// A push is being sent (until ``pushFinished()``).
    mutating func pushStarted() {
        self.pushesInProgress += 1
    }

    /// The push being sent is done.
    mutating func pushFinished() {
        self.pushesInProgress -= 1
    }

    /// Where a push goes, in loop generation `generation` (nil on a loop without a flush batch, which tells no
    /// ticks apart: no push goes to the socket at once there). `encodedBytes`: the size of a push encoded beforehand
    /// (shared by every receiving connection), nil for one encoded for this connection (which is appended unless
    /// it is held or sent at once).
    ///
    /// A push waits while others wait or the channel's write window is full; goes to the socket at once when the
    /// connection is outside a read and nothing else of it waits to leave, once per generation; otherwise it
    /// leaves at the end of the tick: a large (or the only) encoded push as the shared buffer itself, held once
    /// however many slow readers it waits for; a small one copied behind this tick's frames, to leave in the same
    /// write.
    mutating func pushArrived(encodedBytes: Int?, generation: UInt64?) -> PushRoute {
        if self.pushesMustWait { return .hold }
        if let generation, generation != self.directPushGeneration, !self.isReading, !self.output.writtenUnflushed,
            self.output.pendingBytes == 0, self.socketIsFree
        {
            self.directPushGeneration = generation
            return .sendDirectly
        }
        guard let bytes = encodedBytes else { return .append }
        if bytes >= Self.sharedPushMinimumBytes || self.output.pendingBytes == 0 {
            let pending = self.output.pendingBytes > 0 ? self.output.takePending() : nil
            self.output.writtenUnflushed = true
            return .writeToChannel(after: pending)
        }
        return .append
    }

    /// Holds a push behind the ones already waiting; the end-of-tick flush applies the limits to it.
    mutating func hold(_ frame: ByteBuffer) -> TickAction {
        self.output.hold(frame)
        return self.flushRequested()
    }

    /// The channel's writability changed: whether held pushes may be released now.
    mutating func writabilityChanged(_ writable: Bool) -> Bool {
        self.channelWritable = writable
        return writable
    }

    /// A release of held pushes begins: false if one is running already (it is asked for another round instead).
    mutating func releaseStarted() -> Bool {
        switch self.release {
        case .idle:
            self.release = .releasing
            return true
        case .releasing, .releasingWithAnotherRoundRequested:
            self.release = .releasingWithAnotherRoundRequested
            return false
        }
    }

    /// The next held push to hand to the channel, while the channel's window takes them (`channelWritable`, asked
    /// of the channel itself: it changes as the release writes) and the connection is open.
    mutating func nextHeldPush(channelWritable: Bool) -> ByteBuffer? {
        guard channelWritable, self.phase == .open else { return nil }
        return self.output.takeFirstHeld()
    }

    /// A round of the release ended: whether to run another (a flush in it made the channel writable again while
    /// pushes are still held).
    mutating func releaseRoundEnded() -> Bool {
        let again =
            self.release == .releasingWithAnotherRoundRequested && self.output.isHoldingPushes && self.phase == .open
        self.release = again ? .releasing : .idle
        return again
    }

    // MARK: the channel

    /// The handler flushes the channel: whether to track the flush until the channel has written everything
    /// handed to it so far (with a known socket, so that direct sends cannot overtake it;
    /// ``channelFlushCompleted()`` then).
    mutating func channelFlushStarted() -> Bool {
        guard self.hasSocket else { return false }
        self.channelFlushesPending += 1
        return true
    }

    /// The channel wrote everything handed to it before a tracked flush.
    mutating func channelFlushCompleted() {
        self.channelFlushesPending -= 1
    }

    // MARK: limits

    /// Whether the limits need the channel's buffered bytes now: something is held, reading is stopped, or the
    /// channel's window is full. Otherwise everything is under the channel's window (at most the low-water mark)
    /// and nothing would change, the common case, without asking the channel at every flush.
    var queueCheckNeeded: Bool {
        self.phase == .open && (self.output.isHoldingPushes || self.backpressure == .on || !self.channelWritable)
    }

    /// Bytes waiting to leave: output not yet written, held pushes and what the channel buffers.
    func queuedBytes(channelBufferedBytes: Int) -> Int {
        self.output.heldBytes + channelBufferedBytes + self.output.pendingBytes
    }

    /// The channel buffers `channelBufferedBytes`: stops reading at the high-water mark of queued bytes, resumes
    /// below the low-water mark, and (with `applyingHardCap`) cuts the client off past the hard cap, dropping the
    /// held pushes (GOAWAY goes behind the backlog, and nothing more is queued after it).
    mutating func queueMeasured(channelBufferedBytes: Int, applyingHardCap: Bool) -> QueueAction {
        let queued = self.queuedBytes(channelBufferedBytes: channelBufferedBytes)
        var stopped = false
        switch self.backpressure {
        case .off where queued >= self.limits.highWaterMark:
            self.backpressure = .on
            stopped = true
        case .on where queued < self.limits.lowWaterMark:
            self.backpressure = .off
            return .resumeReading
        case .off, .on:
            break
        }
        if applyingHardCap, queued > self.limits.hardCap {
            self.output.dropHeldPushes()
            return .cutOff(queuedBytes: queued, readsStopped: stopped)
        }
        return stopped ? .stopReading : .none
    }

    // MARK: ending

    /// The connection closes: the last output to write (nil: none), after which nothing more is queued. Held pushes
    /// are dropped (GOAWAY is the last frame) and reading is no longer held back (a closing connection reads and
    /// discards until the client closes).
    mutating func closed() -> ByteBuffer? {
        self.phase = .closed
        self.output.dropHeldPushes()
        self.output.writtenUnflushed = false
        self.backpressure = .off
        return self.output.takePending()
    }

    /// The channel is gone: held pushes are forgotten (they would never be read).
    mutating func channelClosed() {
        self.phase = .closed
        self.output.dropHeldPushes()
    }
}
