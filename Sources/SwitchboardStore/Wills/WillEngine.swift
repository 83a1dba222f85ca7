/// A last will as an engine keeps it: the session it belongs to and what the gateway encoded of it (the will and
/// who runs it), opaque to the engine (`Protocol/SPEC.md` §13.10).
public struct StoredWill: Sendable, Hashable {
    /// The session whose will it is.
    public var sessionID: String
    /// The session's user: a session of this user that starts cancels the will once its session ended.
    public var userID: String
    /// The gateway's encoding of the will and the session that runs it.
    public var payload: String
    /// For a will whose session already ended (handed over from a dead node): milliseconds since the Unix epoch at
    /// which the session ended; 0 while the session lives.
    public var endedAtMs: Int64

    /// Creates a record.
    public init(sessionID: String, userID: String, payload: String, endedAtMs: Int64 = 0) {
        self.sessionID = sessionID
        self.userID = userID
        self.payload = payload
        self.endedAtMs = endedAtMs
    }
}

/// Where a cluster node keeps its sessions' last wills beyond its own memory, so that a will fires exactly once in
/// the cluster: the node of the session runs it when the session ends; when that node dies, the live node that
/// sweeps it takes its wills over; and whoever runs a will first claims it, so no will runs twice.
///
/// A single gateway has none: its wills live in its memory and end with it (SPEC [SB-13.10-6]).
public protocol WillEngine: Sendable {
    /// Stores `will`, replacing the session's earlier one.
    /// - Throws: When it could not be stored (the registration fails with `storageFailure`).
    func store(_ will: StoredWill) async throws
    /// Forgets the will of `sessionID` (cleared, or its session ended in a way that does not fire it).
    func remove(sessionID: String) async throws
    /// Notes that the session of `sessionID` ended in a way that fires its will.
    func sessionEnded(sessionID: String, atMs: Int64) async throws
    /// Claims the will of `sessionID` to run it now: true for exactly one caller, and only while the will was not
    /// removed. With `unlessUserOnline`, false also when a session of the will's user is open on any node (the user
    /// came back, or never left: a delayed will is cancelled).
    func claim(sessionID: String, unlessUserOnline: Bool) async throws -> Bool
    /// Installs what runs the wills this node takes over from a dead node (each with its session's end time).
    func onTakenOver(_ handler: @escaping @Sendable ([StoredWill]) -> Void)
}
