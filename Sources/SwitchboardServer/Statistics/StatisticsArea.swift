import NIOCore
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// The `info` operation (`Protocol/SPEC.md`, area `admin`): the gateway's statistics in one answer, in the manner of
/// Redis INFO and Centrifugo's `info` server API. Admins only (the generated grant check refuses others first).
///
/// Everything is read when asked, from what the gateway keeps anyway: the sessions and subscriptions of this node,
/// the presence domain's channels (every node's, on a cluster), the metadata store's sets, write counter and
/// write-back queue, and the engines' ``ClusterStatusReport`` (the cluster's nodes, as the node's probe last read
/// them). The one thing kept for it is the write counter's samples, taken once a second on `timerLoop`, from which
/// the writes per second over the last 10 s come (``WriteRate``).
public final class StatisticsArea: RequestHandler {
    private let sessions: SessionRegistry
    private let subscriptions: SubscriptionRegistry
    private let presence: PresenceRegistry?
    private let store: MetadataStore?
    private let engines: any AreaEngines
    private let nowMillis: @Sendable () -> Int64
    private let startedAtMs: Int64
    private let rate: Mutex<WriteRate>

    public var operations: [Opcode] { [.info] }

    /// Creates the area and starts sampling the store's write counter on `timerLoop` (until the loop shuts down).
    ///
    /// - Parameters:
    ///   - presence: the channels and their members (nil: no presence area, no channels).
    ///   - store: the metadata store (nil: no storage area, no sets or writes).
    ///   - engines: where the cluster's status comes from (single node: none).
    public init(
        sessions: SessionRegistry, subscriptions: SubscriptionRegistry, presence: PresenceRegistry?,
        store: MetadataStore?, engines: any AreaEngines, timerLoop: any EventLoop,
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis
    ) {
        self.sessions = sessions
        self.subscriptions = subscriptions
        self.presence = presence
        self.store = store
        self.engines = engines
        self.nowMillis = nowMillis
        let now = nowMillis()
        self.startedAtMs = now
        self.rate = Mutex(WriteRate(nowMs: now, total: store?.writesTotal ?? 0))
        if store != nil {
            timerLoop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { [weak self] task in
                guard let self else {
                    task.cancel()
                    return
                }
                self.sample()
            }
        }
    }

    /// Notes the write counter now.
    func sample() {
        let total = self.store?.writesTotal ?? 0
        let now = self.nowMillis()
        self.rate.withLock { $0.record(nowMs: now, total: total) }
    }

    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        guard case .info = request else {
            return .failure(ErrorBody(.unavailable, "\(request.operation.name) is not a statistics operation"))
        }
        return .response(.info(self.info()))
    }

    /// The statistics now.
    func info() -> InfoResponse {
        let now = self.nowMillis()
        var answer = InfoResponse(
            version: SwitchboardVersion.current, uptimeMs: UInt64(max(now - self.startedAtMs, 0)),
            serverTimeMs: UInt64(max(now, 0)), connections: UInt64(self.sessions.connectionCount),
            sessions: UInt64(self.sessions.sessionCount), usersOnline: UInt64(self.sessions.onlineUserCount),
            userSubscriptions: UInt64(self.subscriptions.userSubscriptionCount))
        if let presence = self.presence {
            let occupancy = presence.occupancy()
            answer.channels = UInt64(occupancy.count)
            answer.memberships = UInt64(occupancy.reduce(0) { $0 + $1.sessions })
        }
        if let store = self.store {
            let (sets, items) = store.contentCounts()
            answer.metadataSets = UInt64(sets)
            answer.metadataItems = UInt64(items)
            let total = store.writesTotal
            answer.writesTotal = UInt64(total)
            answer.writesPerSecond = self.rate.withLock { $0.perSecond(nowMs: now, total: total) }
            if let status = store.writeBackStatus {
                answer.writeBackQueue = UInt64(max(status.queueLength, 0))
                answer.writeBackAgeMs = status.oldestUncommittedAgeMs
            }
        }
        if let report = self.engines.statusReport {
            answer.nodeId = report.nodeID
            answer.feedPosition = UInt64(max(report.feedPosition, 0))
            answer.nodes = report.nodes.map { node in
                ClusterNodeInfo(
                    nodeId: node.nodeID, address: node.address, startedAtMs: UInt64(max(node.startedAtMs, 0)),
                    heartbeatAtMs: UInt64(max(node.heartbeatAtMs, 0)), alive: node.alive,
                    appliedPosition: UInt64(max(node.appliedPosition, 0)), lagPositions: UInt64(max(node.lagRows, 0)),
                    lagMs: UInt64(max(node.lagMs, 0)), local: node.nodeID == report.nodeID)
            }
        }
        return answer
    }
}
