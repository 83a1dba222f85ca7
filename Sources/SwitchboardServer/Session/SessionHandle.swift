import NIOCore
import Synchronization
import SwitchboardWire

/// Who a logged-in session is: a value that can be passed anywhere.
public struct SessionInfo: Sendable, Hashable {
    /// Server-assigned id, unique for the server's lifetime; announced in WELCOME.
    public var sessionID: String
    /// The connection's number, for logs.
    public var connectionID: UInt64
    /// The authenticated user.
    public var userID: String
    /// The token's role.
    public var role: SessionRole
    /// The kind of client, from HELLO.
    public var clientType: ClientType
    /// The device, from HELLO; one user may be online from several.
    public var deviceID: String
    /// Negotiated features.
    public var features: [String]
    /// When the handshake was accepted (server ms), just before WELCOME was sent.
    public var startedAtMs: Int64 = 0
    /// What the session may do (``GrantSet/unrestricted`` for admins and in open development mode).
    public var grants: GrantSet = .unrestricted
    /// The `jti` of the token the session logged in with, if it had one.
    public var tokenID: String? = nil
    /// The `iat` of the token the session logged in with (seconds since the Unix epoch), if it had one.
    public var tokenIssuedAt: Int64? = nil

    /// Whether the session may do `permission` on `resource`.
    public func allows(_ permission: Permission, on resource: Resource) -> Bool {
        self.grants.allows(permission, on: resource, userID: self.userID)
    }

    /// Whether the session may act for other users.
    public var isAdmin: Bool { self.role == .admin }
}

/// Sends to a session from any thread. Command areas keep these to push events to their subscribers.
public final class SessionHandle: Sendable, Hashable {
    // What a fan-out reads comes first, next to the object's header (one cache line per session where it can).
    /// The event loop of the session's connection.
    public let eventLoop: any EventLoop
    /// The connection's handler, for ``sendOnItsLoop(_:)`` only, whose callers have checked that they run on
    /// ``eventLoop`` (a fan-out to thousands of sessions would otherwise ask the loop for every one of them); nil for
    /// an ``InternalCaller``'s session, which has no connection.
    nonisolated(unsafe) private let handlerOnItsLoop: ConnectionHandler?
    /// Who the session is.
    public let info: SessionInfo
    private let connection: NIOLoopBound<ConnectionHandler>?
    private let subscriptions = Atomic<Int>(0)
    /// The `jti` and `iat` of the token a `renewToken` put in place of the login's (nil: none renewed).
    private let renewedToken = Mutex<(tokenID: String?, issuedAt: Int64?)?>(nil)
    private let maxSubscriptions: Int

    init(info: SessionInfo, eventLoop: any EventLoop, connection: ConnectionHandler, maxSubscriptions: Int) {
        self.info = info
        self.eventLoop = eventLoop
        self.connection = NIOLoopBound(connection, eventLoop: eventLoop)
        self.handlerOnItsLoop = connection
        self.maxSubscriptions = maxSubscriptions
    }

    /// The session of a caller inside the gateway (``InternalCaller``): it has no connection, so what is sent to it
    /// goes nowhere, and it may hold no subscriptions.
    init(internalCaller info: SessionInfo, eventLoop: any EventLoop) {
        self.info = info
        self.eventLoop = eventLoop
        self.connection = nil
        self.handlerOnItsLoop = nil
        self.maxSubscriptions = 0
    }

    /// Whether this is the session of a caller inside the gateway (``InternalCaller``: the HTTP API, the inspector),
    /// which has no connection, rather than a client's.
    var isInternalCaller: Bool { self.connection == nil }

    /// Counts `count` new subscriptions against the connection's limit.
    ///
    /// - Returns: false, counting nothing, when they would pass ``ServerConfiguration/Limits/maxSubscriptionsPerConnection``
    ///   (answer with ``ErrorCode/tooManySubscriptions``).
    public func reserveSubscriptions(_ count: Int = 1) -> Bool {
        while true {
            let current = self.subscriptions.load(ordering: .relaxed)
            guard current + count <= self.maxSubscriptions else { return false }
            if self.subscriptions.compareExchange(expected: current, desired: current + count, ordering: .relaxed).exchanged {
                return true
            }
        }
    }

    /// Gives back subscriptions counted with ``reserveSubscriptions(_:)``.
    public func releaseSubscriptions(_ count: Int = 1) {
        self.subscriptions.subtract(count, ordering: .relaxed)
    }

    /// Subscriptions currently counted.
    public var subscriptionCount: Int { self.subscriptions.load(ordering: .relaxed) }

    /// Sends a push; encodes it on the session's event loop.
    public func send(_ push: Push) {
        self.onLoop { $0.sendPush(.push(push)) }
    }

    /// Sends a push encoded once for many sessions.
    public func send(_ push: EncodedPush) {
        self.onLoop { $0.sendEncodedPush(push) }
    }

    /// Sends a push from the session's own event loop (the caller checked that it runs there).
    func sendOnItsLoop(_ push: EncodedPush) {
        self.handlerOnItsLoop?.sendEncodedPush(push)
    }

    /// Tells the connection its token now expires at `expiresAtMs` (after `renewToken`).
    public func tokenRenewed(expiresAtMs: Int64) {
        self.onLoop { $0.tokenRenewed(expiresAtMs: expiresAtMs) }
    }

    /// Notes the `jti` and `iat` of the token a renewal put in place, by which the session is revoked from now on.
    public func tokenRenewed(tokenID: String?, issuedAt: Int64?) {
        self.renewedToken.withLock { $0 = (tokenID, issuedAt) }
    }

    /// The `jti` of the token the session holds now: the renewed one's, or the login's (``SessionInfo/tokenID``).
    public var currentTokenID: String? { self.renewedToken.withLock { $0.map(\.tokenID) } ?? self.info.tokenID }

    /// The `iat` of the token the session holds now: the renewed one's, or the login's.
    public var currentTokenIssuedAt: Int64? {
        self.renewedToken.withLock { $0.map(\.issuedAt) } ?? self.info.tokenIssuedAt
    }

    /// Ends the session: the client gets GOAWAY with `code` and the connection closes.
    public func disconnect(code: ErrorCode, reason: SessionEndReason, message: String) {
        self.onLoop { $0.disconnect(code: code, reason: reason, message: message) }
    }

    private func onLoop(_ body: @escaping @Sendable (ConnectionHandler) -> Void) {
        guard let connection = self.connection else { return }
        if self.eventLoop.inEventLoop {
            body(connection.value)
        } else {
            self.eventLoop.execute { body(connection.value) }
        }
    }

    public static func == (lhs: SessionHandle, rhs: SessionHandle) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
