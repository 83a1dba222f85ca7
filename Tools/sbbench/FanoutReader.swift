#if canImport(Glibc)
import Glibc
#endif
import CSBBenchLinux
import NIOCore
import SwitchboardWire
import Synchronization

/// The subscriber side of the fan-out scenarios: one thread that reads every subscriber socket with epoll and
/// hands the bytes to a ``FanoutStreamScanner``, which attributes the deliveries.
///
/// Per ready socket it makes one `recv` into one reusable 64 KiB buffer (edge-triggered, so a socket is polled once
/// per readiness; should a read fill the buffer, it reads again until one comes back short) and takes the receive
/// instant once per read with `CLOCK_MONOTONIC`, the clock of `NIODeadline.now()` on Linux that the senders stamp
/// their events with. Nothing is allocated per read or per delivery. The scanner and the per-subscriber partial
/// buffers are the reader's state; the thread takes their lock once per `epoll_wait` return (nobody else takes it
/// while the reader runs), and the waiting side watches the deliveries through the atomics of ``FanoutProgress``.
///
/// With a keep-alive the reader also sends each connection a PING once per interval, spread evenly over it, so that
/// the server, which ends a session it heard nothing from for a few heartbeat intervals, keeps quiet subscribers.
final class FanoutReader<Scanner: FanoutStreamScanner>: Sendable {
    /// The reader's state once it stopped.
    struct Stopped: Sendable {
        var scanner: Scanner
        /// Per subscriber, the received start of a message not yet complete.
        var leftovers: [[UInt8]]
        /// Per subscriber, whether its connection is still open (not closed by the server, not given up).
        var isOpen: [Bool]

        var closedConnections: Int { self.isOpen.count(where: { !$0 }) }
    }

    private struct LoopState: Sendable {
        var streams: FanoutStreams<Scanner>
        var isOpen: [Bool]
        /// Keep-alives sent so far (over all rounds).
        var keepAlivesSent = 0
    }

    private let descriptors: [Int32]
    private let epoll: Int32
    private let keepAlive: FanoutKeepAlive?
    private let state: Mutex<LoopState>
    private let stopRequested = Atomic<Bool>(false)
    private let thread = Mutex<(id: pthread_t?, stopped: Stopped?)>((nil, nil))

    /// Watches the subscribers' sockets (which must be non-blocking). The bytes each subscriber read past its
    /// handshake (``RawSubscriber/leftover``) are the first its scanner sees.
    init(subscribers: [RawSubscriber], scanner: Scanner, keepAlive: FanoutKeepAlive?) throws {
        let epoll = csbbench_epoll_create()
        guard epoll >= 0 else { throw BenchFailure("epoll_create1: \(String(cString: strerror(errno)))") }
        for (index, subscriber) in subscribers.enumerated() {
            guard csbbench_epoll_add(epoll, subscriber.descriptor, UInt64(index)) == 0 else {
                let reason = String(cString: strerror(errno))
                close(epoll)
                throw BenchFailure("epoll_ctl: \(reason)")
            }
        }
        var streams = FanoutStreams(scanner: scanner, subscribers: subscribers.count)
        let now = monotonicNanoseconds()
        var isOpen = Array(repeating: true, count: subscribers.count)
        for (index, subscriber) in subscribers.enumerated() where !subscriber.leftover.isEmpty {
            isOpen[index] = subscriber.leftover.withUnsafeBytes { streams.received($0, subscriber: index, at: now) }
            Self.sendReplies(&streams, on: subscriber.descriptor)
        }
        self.descriptors = subscribers.map(\.descriptor)
        self.epoll = epoll
        self.keepAlive = keepAlive
        self.state = Mutex(LoopState(streams: streams, isOpen: isOpen))
    }

    /// Starts the reading thread.
    func start() {
        let body = ThreadBody { self.run() }
        var id = pthread_t()
        let result = pthread_create(
            &id, nil,
            { context in
                let body = Unmanaged<ThreadBody>.fromOpaque(context!).takeRetainedValue()
                body.run()
                return nil
            }, Unmanaged.passRetained(body).toOpaque())
        precondition(result == 0, "pthread_create: \(result)")
        self.thread.withLock { $0.id = id }
    }

    /// Stops the thread (within one `epoll_wait` timeout) and returns the reader's state; the sockets stay open.
    /// Stopping again returns the same state.
    func stop() -> Stopped {
        self.stopRequested.store(true, ordering: .relaxed)
        return self.thread.withLock { thread in
            if let stopped = thread.stopped { return stopped }
            if let id = thread.id { pthread_join(id, nil) }
            close(self.epoll)
            let stopped = self.state.withLock { state in
                Stopped(scanner: state.streams.scanner, leftovers: state.streams.partial, isOpen: state.isOpen)
            }
            thread.stopped = stopped
            return stopped
        }
    }

    private func run() {
        _ = csbbench_name_thread("sbbench-reader")
        var ready = [UInt64](repeating: 0, count: 1024)
        var scratch = [UInt8](repeating: 0, count: 64 << 10)
        while !self.stopRequested.load(ordering: .relaxed) {
            let count = ready.withUnsafeMutableBufferPointer {
                csbbench_epoll_wait(self.epoll, $0.baseAddress, Int32($0.count), 10)
            }
            guard count >= 0 || errno == EINTR else { fatalError("epoll_wait: \(String(cString: strerror(errno)))") }
            self.state.withLock { state in
                for index in 0..<Int(max(count, 0)) {
                    self.read(subscriber: Int(ready[index]), into: &scratch, state: &state)
                }
                if let keepAlive = self.keepAlive { self.sendKeepAlives(keepAlive, state: &state) }
            }
        }
    }

    /// Reads a ready socket and hands the bytes to the scanner. The socket is watched edge-triggered, so it is read
    /// until a read comes back short (it was drained then; more bytes make it ready again); that is one read per
    /// readiness, as a push is far smaller than the buffer.
    private func read(subscriber: Int, into scratch: inout [UInt8], state: inout LoopState) {
        let descriptor = self.descriptors[subscriber]
        while state.isOpen[subscriber] {
            let count = scratch.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                let now = monotonicNanoseconds()
                let intact = scratch.withUnsafeBytes { bytes in
                    state.streams.received(UnsafeRawBufferPointer(rebasing: bytes[..<count]), subscriber: subscriber, at: now)
                }
                Self.sendReplies(&state.streams, on: descriptor)
                if !intact { self.giveUp(subscriber, state: &state) }
                if count < scratch.count { return }
            } else if count < 0, errno == EINTR {
                continue
            } else {
                if count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) {
                    self.giveUp(subscriber, state: &state)  // closed by the server, or broken
                }
                return
            }
        }
    }

    /// Sends what the scanner asked to send back (a PONG; a few bytes that fit into any socket buffer).
    private static func sendReplies(_ streams: inout FanoutStreams<Scanner>, on descriptor: Int32) {
        guard !streams.replies.isEmpty else { return }
        _ = streams.replies.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        streams.replies.removeAll(keepingCapacity: true)
    }

    /// Stops watching a connection that closed or whose bytes cannot be parsed.
    private func giveUp(_ subscriber: Int, state: inout LoopState) {
        state.isOpen[subscriber] = false
        _ = csbbench_epoll_remove(self.epoll, self.descriptors[subscriber])
    }

    /// Sends the keep-alives that fell due: every connection gets one per interval, connection i at i/N of it.
    private func sendKeepAlives(_ keepAlive: FanoutKeepAlive, state: inout LoopState) {
        let count = self.descriptors.count
        guard count > 0, keepAlive.intervalNanoseconds > 0 else { return }
        let now = monotonicNanoseconds()
        guard now >= keepAlive.since else { return }
        let elapsed = now - keepAlive.since
        let due = Int(elapsed / keepAlive.intervalNanoseconds) * count
            + Int((elapsed % keepAlive.intervalNanoseconds) * UInt64(count) / keepAlive.intervalNanoseconds)
        // After a long pause (the reader started late, or the thread was starved) each connection gets one, not one
        // per missed interval.
        state.keepAlivesSent = max(state.keepAlivesSent, due - count + 1)
        while state.keepAlivesSent <= due {
            let subscriber = state.keepAlivesSent % count
            state.keepAlivesSent += 1
            guard state.isOpen[subscriber] else { continue }
            _ = keepAlive.bytes.withUnsafeBytes {
                send(self.descriptors[subscriber], $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            }
        }
    }
}

/// Bytes a ``FanoutReader`` sends on every connection once per interval: connection i of N at `since` + i/N of the
/// interval, and every interval after (those due before the reader starts go out as it starts).
struct FanoutKeepAlive: Sendable {
    var bytes: [UInt8]
    var intervalNanoseconds: UInt64
    /// Where the schedule starts (`CLOCK_MONOTONIC`): no later than the connections last sent something.
    var since: UInt64

    init(bytes: [UInt8], intervalNanoseconds: UInt64, since: UInt64 = monotonicNanoseconds()) {
        self.bytes = bytes
        self.intervalNanoseconds = intervalNanoseconds
        self.since = since
    }

    /// A PING twice per heartbeat interval of the subscribers' WELCOMEs (at least a second apart), as
    /// ``BenchClient`` pings: the protocol wants a PING from a client that sent nothing for a heartbeat interval.
    /// The schedule starts when the first subscriber wrote its handshake, so no connection waits more than an
    /// interval, or the time the setup took, for its first PING.
    /// On WebSocket (`webSocket`) the PING goes in a client message.
    static func switchboardPing(_ subscribers: [RawSubscriber], webSocket: Bool = false) -> FanoutKeepAlive {
        var ping = ByteBuffer()
        FrameEncoder().encode(.control(.ping(Ping(nonce: 1))), into: &ping)
        let heartbeatMs = subscribers.map(\.heartbeatMs).min() ?? 15_000
        return FanoutKeepAlive(
            bytes: webSocket ? WebSocketFraming.clientMessage(ping.readableBytesView) : Array(ping.readableBytesView), intervalNanoseconds: max(heartbeatMs, 2_000) / 2 * 1_000_000,
            since: subscribers.map(\.handshakeSentAt).min() ?? monotonicNanoseconds())
    }
}

/// The closure a reader thread runs (passed through `pthread_create`'s context pointer).
private final class ThreadBody: Sendable {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}

/// Now on `CLOCK_MONOTONIC`, in nanoseconds: the clock `NIODeadline.now()` reads on Linux.
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
}
