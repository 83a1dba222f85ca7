import NIOCore
import SwitchboardWire

/// Decodes both directions of one proxied connection and reports them: frames with timestamps, pairing with
/// latencies, a direction whose decoding stopped, and the connection's end.
///
/// It only ever sees copies of bytes already handed on for forwarding, and lives on the connection's event loop.
final class ConnectionTap {
    let id: UInt64
    private let sink: any DumpSink
    private let capture: CaptureFile?
    private var clientToServer: FrameScanner
    private var serverToClient: FrameScanner
    private var pairing = RequestPairing()
    private var rules = SessionRules()
    private let openedAt = NIODeadline.now()
    private var firstToClose: ConnectionSide?
    private var inactiveSides: Set<ConnectionSide> = []
    private var opened = false
    private var finished = false

    init(id: UInt64, limits: FrameLimits, sink: any DumpSink, capture: CaptureFile?) {
        self.id = id
        self.sink = sink
        self.capture = capture
        let tapLimits = FrameLimits(
            maxFrameSize: limits.maxFrameSize, maxInflatedSize: limits.maxInflatedSize, compressionEnabled: true)
        self.clientToServer = FrameScanner(
            limits: tapLimits, direction: StreamDirection.clientToServer.frameDirection, recovery: .stop)
        self.serverToClient = FrameScanner(
            limits: tapLimits, direction: StreamDirection.serverToClient.frameDirection, recovery: .stop)
    }

    /// The upstream connection is up: the two byte streams begin.
    func opened(client: String, upstream: String) {
        self.opened = true
        self.emit(.connectionOpened(client: client, upstream: upstream), time: .now())
    }

    /// The upstream could not be reached for this client.
    func upstreamUnreachable(client: String, reason: String) {
        self.finished = true
        self.capture?.close()
        self.emit(.upstreamUnreachable(client: client, reason: reason), time: .now())
    }

    /// Bytes that were forwarded in `direction`, read at `now` (monotonic, for latencies) and `time` (wall clock).
    func observe(_ bytes: ByteBuffer, from direction: StreamDirection, at now: NIODeadline, wallTime time: WallClockTime) {
        switch direction {
        case .clientToServer:
            self.clientToServer.append(bytes)
            while let event = self.clientToServer.next() { self.report(event, direction, now, time) }
        case .serverToClient:
            self.serverToClient.append(bytes)
            while let event = self.serverToClient.next() { self.report(event, direction, now, time) }
        }
    }

    /// One side stopped sending (end of its input) or went away.
    func sideEnded(_ side: ConnectionSide) {
        if self.firstToClose == nil { self.firstToClose = side }
    }

    /// One side's channel is closed; once both are, the connection's end is reported.
    func sideInactive(_ side: ConnectionSide) {
        self.sideEnded(side)
        self.inactiveSides.insert(side)
        guard self.inactiveSides.count == 2, !self.finished else { return }
        self.finished = true
        self.finish()
    }

    private func finish() {
        let now = NIODeadline.now()
        let time = WallClockTime.now()
        for direction in StreamDirection.allCases {
            let events = direction == .clientToServer ? self.clientToServer.finish() : self.serverToClient.finish()
            for event in events {
                switch event {
                case .frame: self.report(event, direction, now, time)
                // The connection is over: bytes left are a frame cut short, not a reason to stop decoding.
                case .stopped(let problem), .garbage(let problem):
                    self.emit(.garbage(problem), time: time, direction: direction)
                }
            }
        }
        for request in self.pairing.takeUnanswered() {
            self.emit(.unanswered(request), time: time, direction: .clientToServer)
        }
        self.capture?.close()
        guard self.opened else { return }
        let summary = ConnectionSummary(
            closedBy: self.firstToClose ?? .client, durationNanoseconds: (now - self.openedAt).nanoseconds,
            clientToServerBytes: self.clientToServer.bytesSeen, serverToClientBytes: self.serverToClient.bytesSeen,
            clientToServerFrames: self.clientToServer.frameCount, serverToClientFrames: self.serverToClient.frameCount)
        self.emit(.connectionClosed(summary), time: time)
    }

    private func report(_ event: ScanEvent, _ direction: StreamDirection, _ now: NIODeadline, _ time: WallClockTime) {
        switch event {
        case .frame(var frame):
            self.pairing.observe(&frame, at: now)
            self.capture?.append(frame.wireBytes)
            self.emit(.frame(frame), time: time, direction: direction)
            for violation in self.rules.observe(frame, from: direction) {
                self.emit(.ruleViolation(violation), time: time, direction: direction)
            }
        case .stopped(let problem), .garbage(let problem):
            self.emit(.decodingStopped(problem), time: time, direction: direction)
        }
    }

    private func emit(_ kind: DumpEvent.Kind, time: WallClockTime, direction: StreamDirection? = nil) {
        self.sink.receive(DumpEvent(kind, time: time, connection: self.id, direction: direction))
    }
}
