import SwitchboardWire

/// Where a ``SwitchboardClient`` stands.
public enum ConnectionState: Sendable, Hashable {
    /// Made, ``SwitchboardClient/connect()`` not called yet (or the first connect failed).
    case notConnected
    /// The first connection is being made (under ``SwitchboardClient/run()``, also while it waits to try again).
    case connecting
    /// Logged in: requests go out at once. After a reconnect this state begins once subscriptions are restored.
    case connected(Welcome)
    /// The connection was lost and the client is reconnecting. `attempt` is the attempt being waited for or made
    /// (from 1), or 0 just after the loss, before the first attempt is scheduled.
    case reconnecting(attempt: Int)
    /// Finished: the app logged out or closed the client (nil), or the client gave up: a fatal refusal or too
    /// many failed attempts (the error). A closed client stays closed; make a new one to start over.
    case closed(SwitchboardClientError?)

    /// Whether requests go out at once.
    public var isConnected: Bool {
        if case .connected = self { return true }
        return false
    }
}

/// What happened to a ``SwitchboardClient``'s connection, in order.
///
/// A session's life reads: `connected`, then after a loss `disconnected` (with `willReconnect` true),
/// `reconnecting` for each attempt, then `connected` and `restored` once the new session has its subscriptions
/// back; it ends with `disconnected` (with `willReconnect` false), after which the stream finishes.
public enum ConnectionEvent: Sendable {
    /// A session started (the first, or a reconnected one whose subscriptions are already restored).
    case connected(Welcome)
    /// The connection ended.
    case disconnected(Disconnection)
    /// Attempt `attempt` (from 1) to reconnect starts after `delay`. `cause` is why: the lost connection's reason
    /// for the first attempt, the previous attempt's failure after that.
    case reconnecting(attempt: Int, delay: Duration, cause: SwitchboardClientError)
    /// After a reconnect: what was subscribed again, and what could not be.
    case restored(RestoreReport)
    /// The session's token was renewed with a fresh one from the token provider, after the server said it
    /// expires soon. `expiresAtMs` is the new expiry.
    case tokenRenewed(expiresAtMs: UInt64)
    /// Renewing the session's token failed; the server ends the session when the old token expires.
    case tokenRenewalFailed(SwitchboardClientError)
}

/// A connection that ended.
public struct Disconnection: Sendable {
    /// Why: nil when the app logged out or closed the client; else the GOAWAY (kind
    /// ``SwitchboardClientError/Kind/goAway``, with the server's code), a dead connection, or the server closing.
    public var error: SwitchboardClientError?
    /// The server's GOAWAY, if it sent one.
    public var goAway: GoAway?
    /// Whether the client reconnects. False means it is closed for good.
    public var willReconnect: Bool

    /// Creates a value.
    public init(error: SwitchboardClientError?, goAway: GoAway?, willReconnect: Bool) {
        self.error = error
        self.goAway = goAway
        self.willReconnect = willReconnect
    }
}

/// A subscription the client made for the app and restores on every new session.
public enum RestorableSubscription: Sendable, Hashable {
    /// `subscribeChannel`, with the options it was made with.
    case channel(SubscribeChannelRequest)
    /// `subscribeUserMetadata` of a user ("" for the session's own user).
    case userMetadata(userID: String)
    /// `subscribeProfiles` of these users and groups (restored in batches of up to 100 of each).
    case profiles(userIDs: [String], groupIDs: [String])
    /// `registerProvider` of these kinds.
    case provider(kinds: [ProfileKind])
    /// `subscribeChanges` (the admin change stream) with its filter, resuming after the last change received
    /// (`resumeEpoch`, `resumeFrom`).
    case changes(SubscribeChangesRequest)
    /// `setWill`: the session's last will, registered again on the new session.
    case will(SetWillRequest)
}

/// What a reconnect restored.
///
/// Event subscriptions (`subscribeEvent`) are not in it: they belong to the user and the server keeps them across
/// sessions (`Protocol/SPEC.md` §13.4), so there is nothing to restore; the online-only events missed meanwhile are
/// asked for (``events``).
public struct RestoreReport: Sendable {
    /// A subscription the new session refused.
    public struct Failure: Sendable {
        /// The subscription.
        public var subscription: RestorableSubscription
        /// The server's refusal. The client no longer tracks the subscription; subscribe again to retry.
        public var error: SwitchboardClientError
    }

    /// Subscriptions made again, in the order they were restored.
    public var restored: [RestorableSubscription] = []
    /// Subscriptions the server refused.
    public var failed: [Failure] = []
    /// The answer of the restored admin change stream, when there is one: with `gap` the changes since the last one
    /// received could not all be replayed, and the app re-reads the state it follows.
    public var changeStream: SubscribeChangesResponse?
    /// The answer of the resume of online-only events (`resumeEvents`, SB-13.4-9), when the client had received a
    /// position to resume from: the `replayed` events follow on ``SwitchboardClient/subscribedEvents``; with `gap`
    /// some may be missing (the node restarted, it is another node of a cluster, or they are older than its window)
    /// and the app re-reads what it follows. Nil: nothing to resume, or the request failed (logged).
    public var events: ResumeEventsResponse?
}
