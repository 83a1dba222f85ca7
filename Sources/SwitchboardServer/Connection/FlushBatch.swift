import NIOCore

/// Per-event-loop bookkeeping shared by the loop's connections: the end-of-tick flush list and the deadline sweep.
///
/// One task per tick flushes every connection with output, instead of one task per connection: a push fanned out
/// to thousands of sessions on a loop costs one scheduled task, not thousands of closures. One repeating sweep
/// checks every connection's handshake and heartbeat deadlines, instead of a scheduled task per connection: NIO
/// cancels a scheduled task by a linear search of the loop's timer heap, so with thousands of connections each
/// cancellation (every close) would scan thousands of timers. Used only on its event loop.
final class FlushBatch {
    /// How often the sweep checks deadlines (so timeouts fire up to this late).
    static let sweepInterval = TimeAmount.milliseconds(100)

    private let eventLoop: any EventLoop
    private var pending: [ConnectionHandler] = []
    private var scheduled = false
    private var watched: [ObjectIdentifier: ConnectionHandler] = [:]
    private var sweep: RepeatedTask?
    /// Advances at the end of every tick in which something was flushed or written directly (see
    /// ``advanceGenerationAtEndOfTick()``): connections tell pushes of the same tick apart by it.
    private(set) var generation: UInt64 = 0

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    /// Checks `handler`'s deadlines every ``sweepInterval`` until ``unwatch(_:)``.
    func watch(_ handler: ConnectionHandler) {
        self.watched[ObjectIdentifier(handler)] = handler
        guard self.sweep == nil else { return }
        let bound = NIOLoopBound(self, eventLoop: self.eventLoop)
        self.sweep = self.eventLoop.scheduleRepeatedTask(initialDelay: Self.sweepInterval, delay: Self.sweepInterval) {
            _ in bound.value.checkDeadlines()
        }
    }

    private func checkDeadlines() {
        let now = NIODeadline.now()
        // A check may close a connection, which unwatches it: the loop iterates the dictionary as it was (a value;
        // a removal during the loop copies it), without an array of every connection per sweep.
        let watched = self.watched
        for handler in watched.values { handler.checkDeadlines(now: now) }
    }

    /// Stops checking `handler` (it closed).
    func unwatch(_ handler: ConnectionHandler) {
        self.watched[ObjectIdentifier(handler)] = nil
    }

    /// Flushes `handler` at the end of this tick (once, however often it is added before then).
    func add(_ handler: ConnectionHandler) {
        self.pending.append(handler)
        guard !self.scheduled else { return }
        self.scheduled = true
        self.eventLoop.assumeIsolated().execute { self.run() }
    }

    /// Makes ``generation`` advance at the end of this tick (a connection wrote a push directly).
    func advanceGenerationAtEndOfTick() {
        guard !self.scheduled else { return }
        self.scheduled = true
        self.eventLoop.assumeIsolated().execute { self.run() }
    }

    private func run() {
        self.generation &+= 1
        self.scheduled = false
        let handlers = self.pending
        self.pending.removeAll(keepingCapacity: true)
        for handler in handlers { handler.flushScheduledOutput() }
    }
}

/// One ``FlushBatch`` per event loop of a group, each made on its loop when first needed.
struct FlushBatches: Sendable {
    private let boxes: [ObjectIdentifier: NIOLoopBoundBox<FlushBatch?>]

    init(group: any EventLoopGroup) {
        var boxes: [ObjectIdentifier: NIOLoopBoundBox<FlushBatch?>] = [:]
        for loop in group.makeIterator() {
            boxes[ObjectIdentifier(loop)] = .makeEmptyBox(valueType: FlushBatch.self, eventLoop: loop)
        }
        self.boxes = boxes
    }

    /// The batch of `loop`, when it belongs to the group. Call on `loop`.
    func batch(for loop: any EventLoop) -> FlushBatch? {
        guard let box = self.boxes[ObjectIdentifier(loop)] else { return nil }
        if let batch = box.value { return batch }
        let batch = FlushBatch(eventLoop: loop)
        box.value = batch
        return batch
    }
}
