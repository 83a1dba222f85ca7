import Synchronization

/// Whether this node may still act for the cluster, and what it does once it may not (it is *fenced*).
///
/// The other nodes sweep a node whose `sb_node` heartbeat is older than the node timeout: they end its sessions,
/// presence and locks and terminate its database sessions. A node therefore stops acting for the cluster on its own
/// once its last successful heartbeat is that old (a pause, a VM freeze or a cut-off database may have let the
/// others sweep it meanwhile), and when its heartbeat finds its row gone (it was swept). Fencing is final: the node
/// stops serving and exits (a node that restarts is a new node, with a new id).
///
/// The node notes when it *sent* each heartbeat that succeeded. The database stamps the row later than that, so the
/// node's view of its own age is never younger than the others'; it also fences itself a twentieth of the timeout
/// early, for the clocks' rates. Before its first heartbeat succeeded the node is in no `sb_node` row, so no one
/// can sweep it and it counts as alive.
///
/// Every writer asks ``checkAlive()`` before each transaction (``PostgresPool/withConnection(_:timeout:_:)``, once it leased a connection), so a node that
/// wakes up after the others swept it writes nothing more: a transaction it had begun before the sweep was ended with
/// its database session by the sweeping node, and a new one is refused here.
public final class NodeLiveness: Sendable, Hashable {
    private struct State {
        var timeout: Duration
        /// When the last successful heartbeat was sent (nil: not registered yet).
        var lastBeat: ContinuousClock.Instant?
        var fenced: NodeFenced?
        var handlers: [@Sendable (NodeFenced) -> Void] = []
    }

    /// The node these are of.
    public let nodeID: String
    private let state: Mutex<State>

    /// A node not registered yet, fenced once a heartbeat is `timeout` old.
    public init(nodeID: String, timeout: Duration) {
        self.nodeID = nodeID
        self.state = Mutex(State(timeout: timeout))
    }

    /// How old the last heartbeat may get before the others sweep the node (the node timeout).
    public var timeout: Duration {
        get { self.state.withLock { $0.timeout } }
        set { self.state.withLock { $0.timeout = newValue } }
    }

    /// Whether the node fenced itself (it serves no more and is about to exit).
    public var isFenced: Bool { self.state.withLock { $0.fenced != nil } }

    /// Why the node fenced itself, once it did.
    public var fenced: NodeFenced? { self.state.withLock { $0.fenced } }

    /// When the node fences itself unless a heartbeat succeeds first (nil: not registered yet, or fenced).
    var fenceDeadline: ContinuousClock.Instant? {
        self.state.withLock { state in
            guard state.fenced == nil, let last = state.lastBeat else { return nil }
            return last + state.timeout - state.timeout / 20
        }
    }

    /// Notes a heartbeat that succeeded, sent at `sent` (ignored once fenced).
    func beat(sentAt sent: ContinuousClock.Instant) {
        self.state.withLock { state in
            guard state.fenced == nil else { return }
            if let last = state.lastBeat, last > sent { return }
            state.lastBeat = sent
        }
    }

    /// Throws ``NodeFenced`` when the node is fenced, or fences it now when its last heartbeat is too old.
    public func checkAlive(now: ContinuousClock.Instant = .now) throws(NodeFenced) {
        let fenced: NodeFenced? = self.state.withLock { state in
            if let fenced = state.fenced { return fenced }
            guard let last = state.lastBeat, now - last >= state.timeout - state.timeout / 20 else { return nil }
            return NodeFenced(node: self.nodeID, reason: .heartbeatTooOld(now - last, timeout: state.timeout))
        }
        guard let fenced else { return }
        throw self.fence(fenced)
    }

    /// Fences the node (once: a later call returns the first reason) and tells the handlers.
    @discardableResult
    func fence(_ reason: NodeFenced) -> NodeFenced {
        let (first, handlers) = self.state.withLock { state -> (NodeFenced, [@Sendable (NodeFenced) -> Void]) in
            if let fenced = state.fenced { return (fenced, []) }
            state.fenced = reason
            defer { state.handlers = [] }
            return (reason, state.handlers)
        }
        for handler in handlers { handler(first) }
        return first
    }

    /// Calls `handler` once when the node fences itself (at once if it already did), on the fencing task.
    public func onFenced(_ handler: @escaping @Sendable (NodeFenced) -> Void) {
        let fenced = self.state.withLock { state -> NodeFenced? in
            if state.fenced == nil { state.handlers.append(handler) }
            return state.fenced
        }
        if let fenced { handler(fenced) }
    }

    public static func == (lhs: NodeLiveness, rhs: NodeLiveness) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// The node stopped acting for the cluster: it stops serving and its process exits with a failure.
public struct NodeFenced: Error, Sendable, CustomStringConvertible {
    /// Why.
    public enum Reason: Sendable {
        /// Its last successful heartbeat is this old, at least the node timeout: the others may have swept it.
        case heartbeatTooOld(Duration, timeout: Duration)
        /// Its heartbeat found its `sb_node` row gone: another node declared it dead and swept it.
        case swept
    }

    /// The node's id.
    public var node: String
    /// Why it fenced itself.
    public var reason: Reason

    public var description: String {
        switch self.reason {
        case .heartbeatTooOld(let age, let timeout):
            let seconds = Double(age.components.seconds) + Double(age.components.attoseconds) / 1e18
            let shown = (seconds * 10).rounded() / 10
            return "node \(self.node) could not refresh its heartbeat for \(shown) s (node timeout \(timeout)) "
                + "and stops serving"
        case .swept:
            return "node \(self.node) was declared dead by the cluster (its sb_node row is gone) and stops serving"
        }
    }
}
