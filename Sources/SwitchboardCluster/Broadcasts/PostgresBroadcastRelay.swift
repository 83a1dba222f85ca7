import Logging
import PostgresNIO
import ServiceLifecycle
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// Carries channel broadcasts between the nodes of a cluster with PostgreSQL `NOTIFY` on the channel `sb_broadcast`
/// (`Protocol/SPEC.md` [SB-13.11-8]): the lightest path the cluster has, with no table and no feed row, since a
/// broadcast is ephemeral.
///
/// One connection sends: the broadcasts this node accepted, one `pg_notify` after the other in the order they were
/// relayed, so the other nodes get them in that order. Another connection `LISTEN`s and hands what other nodes sent
/// to the broadcast area (``RelayedBroadcastReceiver``); the node's own notifications are skipped. Best effort:
/// while a connection is down (it reconnects with backoff), broadcasts are lost for the other nodes, as they are
/// for a member whose connection drops; at most ``backlogLimit`` wait for the sender, the oldest dropped beyond.
public final class PostgresBroadcastRelay: BroadcastRelay, Service, Sendable {
    /// The notification channel.
    static let channel = "sb_broadcast"
    /// Broadcasts waiting for the sender's connection at most.
    public static let backlogLimit = 10_000

    private let location: PostgresLocation
    private let nodeID: String
    private let logger: Logger
    private let outgoing: AsyncStream<(broadcast: ChannelBroadcast, keep: Bool)>
    private let outgoingSink: AsyncStream<(broadcast: ChannelBroadcast, keep: Bool)>.Continuation
    private let receiver = Mutex<(any RelayedBroadcastReceiver)?>(nil)
    private let connectionIDs = Atomic<Int>(5_000)

    init(location: PostgresLocation, nodeID: String, logger: Logger) {
        self.location = location
        self.nodeID = nodeID
        self.logger = logger
        (self.outgoing, self.outgoingSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(Self.backlogLimit))
    }

    /// Where broadcasts from other nodes go from now on.
    func attach(_ receiver: (any RelayedBroadcastReceiver)?) {
        self.receiver.withLock { $0 = receiver }
    }

    public func relay(_ broadcast: ChannelBroadcast, keep: Bool) {
        self.outgoingSink.yield((broadcast, keep))
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.send() }
                group.addTask { await self.listen() }
                await group.waitForAll()
            }
        }
        self.outgoingSink.finish()
    }

    private func connect(_ role: String) async throws -> PostgresConnection {
        var configuration = self.location.configuration(applicationName: "switchboard-broadcast-\(role)-\(self.nodeID)")
        configuration.options.connectTimeout = .seconds(2)
        return try await PostgresConnection.connect(
            configuration: configuration, id: self.connectionIDs.add(1, ordering: .relaxed).newValue, logger: self.logger)
    }

    private func send() async {
        var pending = self.outgoing.makeAsyncIterator()
        var backoff = ReconnectPolicy.connection.backoff()
        var next: (broadcast: ChannelBroadcast, keep: Bool)? = nil
        while !Task.isCancelled {
            do {
                let connection = try await self.connect("send")
                defer { Task { _ = try? await connection.close() } }
                backoff.succeeded()
                while !Task.isCancelled {
                    if next == nil { next = await pending.next() }
                    guard let outgoing = next else { return }  // finished
                    let payload = NotifyPayload.encode(outgoing.broadcast, keep: outgoing.keep, node: self.nodeID)
                    if payload.utf8.count <= NotifyPayload.maxBytes {
                        try await connection.query("SELECT pg_notify(\(Self.channel), \(payload))", logger: self.logger)
                    }
                    next = nil
                }
            } catch {
                if Task.isCancelled { return }
                next = nil  // lost: ephemeral
                self.logger.warning("broadcast relay connection lost", metadata: ["error": "\(String(reflecting: error))"])
                try? await backoff.wait()
            }
        }
    }

    private func listen() async {
        var backoff = ReconnectPolicy.connection.backoff()
        while !Task.isCancelled {
            do {
                let connection = try await self.connect("listen")
                defer { Task { _ = try? await connection.close() } }
                try await withTaskCancellationHandler {
                    try await connection.listen(on: Self.channel) { notifications in
                        backoff.succeeded()
                        for try await notification in notifications {
                            guard let (node, broadcast, keep) = NotifyPayload.decode(notification.payload) else {
                                self.logger.warning("a broadcast notification that is not one was skipped")
                                continue
                            }
                            guard node != self.nodeID else { continue }
                            self.receiver.withLock { $0 }?.receiveRelayed(broadcast, keep: keep)
                        }
                    }
                } onCancel: {
                    _ = connection.close() as EventLoopFuture<Void>
                }
            } catch {
                if Task.isCancelled { return }
                self.logger.warning(
                    "broadcast listen connection lost", metadata: ["error": "\(String(reflecting: error))"])
            }
            try? await backoff.wait()
        }
    }
}
