import SwitchboardClient
import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// A cluster with `--redis`: committed changes travel to the other nodes through Redis pub/sub, and PostgreSQL stays
/// the record (what Redis loses is read from it).
@Suite("Cluster Redis relay", .serialized, .timeLimit(.minutes(3)))
struct ClusterRedisRelayTests {
    @Test("with Redis, a storage event reaches another node at once although that node polls PostgreSQL only every 30 s")
    func relayedChangesArriveWithoutWaitingForAPoll() async throws {
        let redis = try await TestRedis.start()
        defer { Task { await redis.stop() } }
        try await withCluster(nodes: 2, redis: redis, pollInterval: .seconds(30)) { _, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let events = StorageEventIterator(watcher.storageEvents)
            try await watcher.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withMetadata: true))
            #expect(await events.next(seconds: 5)?.eventType == .snapshot)
            // The first poll of each node ran at start; from here only the relay (no NOTIFY with Redis) is fast.
            let writer = try await nodes[0].client("Tony")
            for round in 0..<20 {
                let started = ContinuousClock.now
                _ = try await writer.setChannelMetadata(channel: "room", items: [MetadataItem(key: "k", value: "v\(round)")])
                let event = try #require(await events.next(seconds: 5), "no storage event through the relay")
                #expect(event.items.first?.value == "v\(round)")
                #expect(ContinuousClock.now - started < .seconds(10))  // far below the 30 s poll
            }
            // Locks travel the same way.
            try await writer.setLock(channel: "room", name: "pen")
            try await writer.acquireLock(channel: "room", name: "pen")
            let settled = try await eventually(seconds: 10) {
                try await watcher.getLocks(channel: "room").locks.map(\.owner) == ["Tony"]
            }
            #expect(settled)
            for client in [watcher, writer] { await client.close() }
        }
    }

    @Test("when Redis dies, changes still reach the other nodes through PostgreSQL, in order and complete")
    func aDeadRelayLosesNothing() async throws {
        let redis = try await TestRedis.start()
        try await withCluster(nodes: 2, redis: redis, pollInterval: .milliseconds(100)) { _, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let events = StorageEventIterator(watcher.storageEvents)
            try await watcher.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withMetadata: true))
            #expect(await events.next(seconds: 5)?.eventType == .snapshot)
            let writer = try await nodes[0].client("Tony")
            _ = try await writer.setChannelMetadata(channel: "room", items: [MetadataItem(key: "k", value: "before")])
            #expect(await events.next(seconds: 5)?.items.first?.value == "before")

            redis.server.killAndWait()
            for round in 0..<30 {
                _ = try await writer.setChannelMetadata(channel: "room", items: [MetadataItem(key: "k", value: "r\(round)")])
            }
            var values: [String] = []
            while values.count < 30, let event = await events.next(seconds: 10) {
                values.append(event.items.first?.value ?? "")
            }
            #expect(values == (0..<30).map { "r\($0)" })
            #expect(try await watcher.getChannelMetadata(channel: "room").items.first?.value == "r29")
            for client in [watcher, writer] { await client.close() }
        }
        await redis.stop()
    }
}
