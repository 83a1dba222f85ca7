import NIOCore
import SwitchboardWire

/// The life of one connection as a value: whether it is logged in, which requests it admits and which are in
/// flight, when it is over and why the session ended.
///
/// ``ConnectionHandler`` feeds it what happened (a HELLO accepted, a request arrived or answered, the client's end of
/// input, a shutdown) and performs the ``Action`` it returns: sending GOAWAY, draining the connection
/// (SB-5.8-5), closing the socket. The machine does no I/O, so its rules are tested without sockets
/// (`ConnectionStateMachineTests`), in the way postgres-nio's `ConnectionStateMachine` separates protocol state from
/// the channel handler.
struct ConnectionStateMachine {
    enum State: Equatable {
        /// Connected; HELLO not yet received.
        case awaitingHello
        /// Logged in.
        case ready
        /// No new requests (a shutdown sent GOAWAY, or the client ended its input): answering those in flight, then
        /// closing.
        case draining
        /// Closing or closed: nothing more is read or sent, except the frames already owed.
        case closed
    }

    /// What the handler does next.
    enum Action: Equatable {
        /// Nothing.
        case none
        /// Send GOAWAY (`code`, `reason`, `message`), then end the connection as ``closeConnection`` does.
        case fail(ErrorCode, SessionEndReason, String)
        /// Send GOAWAY with `code` (0: a normal close) and `reason`; end the connection too if `thenClose`.
        case sendGoAway(code: UInt32, reason: SessionEndReason, message: String, thenClose: Bool)
        /// End the connection: write what is owed, half-close, read until the client closes (SB-5.8-5).
        case closeConnection
        /// Close the socket now (the connection was already ending and waited for this).
        case closeSocket
    }

    /// Whether a request may go on to be handled.
    enum Admission: Equatable {
        case admit
        /// Answer it with this error and go on (the connection stays open).
        case reject(ErrorCode, String)
    }

    private(set) var state: State = .awaitingHello
    /// Why the session ends: the first reason given wins; nil until one is known.
    private(set) var endReason: SessionEndReason?
    /// The highest request id read (SB-5.8-6: `GOAWAY.lastRequestId`).
    private(set) var highestRequestID: UInt32 = 0
    /// Requests admitted and not answered yet, with when each arrived.
    private var inFlight = InFlightRequests()
    /// Most requests in flight at once (SB-5.4).
    let maxInflight: Int

    /// When a connection that has not sent HELLO is closed.
    private(set) var handshakeDeadline = NIODeadline.distantFuture
    /// When the last complete frame arrived: the heartbeat window counts from it (SB-5.6-3). The handler sets it for
    /// every frame it decodes.
    var lastFrameReceived = NIODeadline.uptimeNanoseconds(0)
    /// The heartbeat interval granted in WELCOME.
    private(set) var heartbeatInterval: TimeAmount = .seconds(15)
    /// Intervals without a complete frame after which the session ends (SB-5.6-3).
    let heartbeatMisses: Int
    /// When the session's token expires (server ms), if it has one.
    private(set) var tokenExpiresAtMs: Int64?
    /// When the expiry notice is due (server ms), until it is sent.
    private var tokenNoticeAtMs: Int64?

    /// How far ahead of a token's expiry the server's notice comes (SB-5.3-4).
    static let tokenNoticeLeadMs: Int64 = 60_000

    init(maxInflight: Int, heartbeatMisses: Int = 3) {
        self.maxInflight = maxInflight
        self.heartbeatMisses = heartbeatMisses
    }

    /// Whether the connection is still open for reading and sending.
    var isOpen: Bool { self.state != .closed }

    /// Whether the session may still receive pushes and answers: logged in and not closing.
    var isLoggedIn: Bool { self.state == .ready || self.state == .draining }

    /// Requests in flight.
    var inFlightCount: Int { self.inFlight.count }

    // MARK: handshake

    /// The connection was accepted at `now`: HELLO must come within `handshakeTimeout`.
    mutating func connected(at now: NIODeadline, handshakeTimeout: TimeAmount) {
        self.lastFrameReceived = now
        self.handshakeDeadline = now + handshakeTimeout
    }

    /// HELLO was accepted: the session is open, with heartbeats every `heartbeatInterval`.
    mutating func helloAccepted(heartbeatInterval: TimeAmount = .seconds(15)) {
        guard self.state == .awaitingHello else { return }
        self.state = .ready
        self.heartbeatInterval = heartbeatInterval
        self.handshakeDeadline = .distantFuture
    }

    // MARK: deadlines

    /// The session's token now expires at `expiresAtMs`: the notice is due 60 s ahead. Returns whether it is due
    /// already (the caller checks the deadlines right after this tick's replies).
    mutating func tokenRenewed(expiresAtMs: Int64, nowMillis: Int64) -> Bool {
        self.tokenExpiresAtMs = expiresAtMs
        let (noticeAtMs, overflow) = expiresAtMs.subtractingReportingOverflow(Self.tokenNoticeLeadMs)
        self.tokenNoticeAtMs = overflow ? .min : noticeAtMs
        return self.tokenNoticeAtMs! <= nowMillis
    }

    /// What the deadline sweep found: a token notice to send first (with the token's expiry), then an action.
    struct DeadlineCheck: Equatable {
        var tokenNoticeForExpiryAtMs: Int64?
        var action: Action = .none
    }

    /// Whether the handshake timeout has run out at `now` while HELLO is still awaited.
    func handshakeOverdue(now: NIODeadline) -> Bool {
        self.state == .awaitingHello && now >= self.handshakeDeadline
    }

    /// The deadlines that passed by `now` (monotonic) and `nowMillis` (server time): no HELLO within the handshake
    /// timeout (1007), the token's notice and expiry (2002, SB-5.3-4), no complete frame for the heartbeat window
    /// (1009, SB-5.6-3).
    ///
    /// `firstBytesUnread`: the client's first bytes wait in the socket, not yet read by the server (its loop is behind,
    /// a burst of thousands of connections on a loaded machine). The server is late then, not the client: the
    /// handshake timeout does not end the connection, and the check comes again at the next sweep (by when the loop
    /// has read them, and HELLO is handled or the client is timed out as usual).
    mutating func deadlinesPassed(now: NIODeadline, nowMillis: Int64, firstBytesUnread: Bool = false) -> DeadlineCheck {
        switch self.state {
        case .awaitingHello:
            guard now >= self.handshakeDeadline, !firstBytesUnread else { return DeadlineCheck() }
            return DeadlineCheck(action: .fail(.handshakeRequired, .protocolError, "no HELLO within the handshake timeout"))
        case .ready, .draining:
            var check = DeadlineCheck()
            if let expiry = self.tokenExpiresAtMs {
                if let notice = self.tokenNoticeAtMs, nowMillis >= notice {
                    self.tokenNoticeAtMs = nil
                    check.tokenNoticeForExpiryAtMs = expiry
                }
                if nowMillis >= expiry {
                    check.action = .fail(.tokenExpired, .authExpired, "the session's token expired; renew it before it does")
                    return check
                }
            }
            let misses = Int64(self.heartbeatMisses)
            if now - self.lastFrameReceived > TimeAmount.nanoseconds(self.heartbeatInterval.nanoseconds * misses) {
                check.action = .fail(.heartbeatTimeout, .abnormal, "nothing received for \(misses) heartbeat intervals")
            }
            return check
        case .closed:
            return DeadlineCheck()
        }
    }

    // MARK: requests

    /// A request frame arrived: records its id and says whether it may be handled (SB-5.4, SB-5.8-2).
    mutating func requestArrived(id: UInt32) -> Admission {
        if id > self.highestRequestID { self.highestRequestID = id }
        switch self.state {
        case .draining:
            return .reject(.shuttingDown, "the server is shutting down")
        case .awaitingHello, .closed:
            return .reject(.handshakeRequired, "no session")
        case .ready:
            break
        }
        if self.inFlight.contains(id) {
            return .reject(.duplicateRequestId, "request id \(id) is already in flight")
        }
        if self.inFlight.count >= self.maxInflight {
            return .reject(.tooManyInflight, "more than \(self.maxInflight) requests in flight")
        }
        return .admit
    }

    /// An admitted request goes to its command area, to be answered later (``answered(id:)``).
    mutating func requestStarted(id: UInt32, at arrival: NIODeadline) {
        self.inFlight.insert(id, arrival: arrival)
    }

    /// Request `id` is answered now: when it arrived (nil if it was answered before, and this answer must be
    /// dropped) and what follows (a draining connection closes after its last answer).
    mutating func answered(id: UInt32) -> (arrival: NIODeadline, then: Action)? {
        guard let arrival = self.inFlight.removeValue(forKey: id) else { return nil }
        if self.state == .draining && self.inFlight.isEmpty { return (arrival, .closeConnection) }
        return (arrival, .none)
    }

    /// `logout` was answered: GOAWAY 0 with reason `logout`, then the close (SB-5.7-1).
    mutating func loggedOut() -> Action {
        self.endReason = .logout
        return .sendGoAway(code: 0, reason: .logout, message: "logged out", thenClose: true)
    }

    // MARK: ending

    /// The client sent GOAWAY: code 0 ends the session normally, like `logout` (SB-5.7-3).
    mutating func peerSentGoAway(code: UInt64) -> Action {
        self.endReason = code == 0 ? .logout : .abnormal
        return .closeConnection
    }

    /// The client ended its input (half-close). `partialFrameBytes`: bytes of an incomplete frame received.
    mutating func inputClosed(partialFrameBytes: Int) -> Action {
        switch self.state {
        case .closed:
            return .closeSocket  // a closing connection waited for this: the client has what it will read
        case .awaitingHello, .ready, .draining:
            if partialFrameBytes > 0 {
                return .fail(.truncatedFrame, .abnormal, "the stream ended inside a frame")
            }
            if self.state == .awaitingHello || self.inFlight.isEmpty { return .closeConnection }
            // Answers still to come (durable writes, lock waits): close once the last one is sent.
            self.state = .draining
            return .none
        }
    }

    /// Graceful shutdown: tell the client, answer what is in flight, then close (SB-5.8-2).
    mutating func shutdownRequested() -> Action {
        switch self.state {
        case .awaitingHello:
            return .fail(.shuttingDown, .serverShutdown, "the server is shutting down")
        case .ready:
            self.state = .draining
            self.endReason = .serverShutdown
            return .sendGoAway(
                code: ErrorCode.shuttingDown.rawValue, reason: .serverShutdown, message: "the server is shutting down",
                thenClose: self.inFlight.isEmpty)
        case .draining, .closed:
            return .none
        }
    }

    /// The end of the shutdown grace period: whatever is still open closes.
    mutating func shutdownGraceEnded() -> Action {
        if self.endReason == nil { self.endReason = .serverShutdown }
        return self.state == .closed ? .closeSocket : .closeConnection
    }

    /// The connection is about to fail with `reason`: false if it is closed already (nothing to do).
    mutating func failing(reason: SessionEndReason) -> Bool {
        guard self.state != .closed else { return false }
        if self.endReason == nil { self.endReason = reason }
        return true
    }

    /// The slow-consumer cut-off (SB-5.9-1) ends the session with reason `slowConsumer`.
    mutating func cutOffAsSlowConsumer(queuedBytes: Int) -> Action {
        self.endReason = .slowConsumer
        return .sendGoAway(
            code: ErrorCode.slowConsumer.rawValue, reason: .slowConsumer,
            message: "outbound queue passed \(queuedBytes) bytes", thenClose: true)
    }

    /// The connection starts closing: false if it already was.
    mutating func closing() -> Bool {
        guard self.state != .closed else { return false }
        self.state = .closed
        return true
    }

    /// The channel is gone: the reason the session ended (abnormal unless one was given).
    mutating func channelClosed() -> SessionEndReason {
        self.state = .closed
        self.inFlight.removeAll()
        return self.endReason ?? .abnormal
    }
}
