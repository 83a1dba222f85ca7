import SwitchboardClient
import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Item TTLs in a cluster sharing one PostgreSQL database (`Protocol/SPEC.md` SB-13.1-9): every node sweeps, one
/// transaction wins each expiry, and the one `expired` change reaches subscribers on every node through the feed.
@Suite("Cluster item TTL", .serialized, .timeLimit(.minutes(3)))
struct ClusterItemTTLTests {
    /// A client on each node subscribed to `channel` with metadata, past its snapshot.
    private static func watchers(of channel: String, on nodes: [ClusterNode]) async throws
        -> [(SwitchboardClient, StorageEventIterator)]
    {
        var watchers: [(SwitchboardClient, StorageEventIterator)] = []
        for index in nodes.indices {
            let watcher = try await nodes[index].client("Watcher\(index)")
            let events = StorageEventIterator(watcher.storageEvents)
            try await watcher.subscribeChannel(channel: channel, options: ChannelSubscriptionOptions(withMetadata: true))
            let snapshot = try #require(await events.next(seconds: 5))
            #expect(snapshot.eventType == .snapshot)
            watchers.append((watcher, events))
        }
        return watchers
    }

    @Test("an item expires once: one expired event on every node, one majorRevision step, gone from every node")
    func anItemExpiresOnceAcrossTheCluster() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            let watchers = try await Self.watchers(of: "room", on: nodes)
            let writer = try await nodes[0].client("Tony")
            let written = try await writer.setChannelMetadata(
                channel: "room",
                items: [.expiring("cursor", "1,2", after: .milliseconds(300)), MetadataItem(key: "topic", value: "t")])
            #expect(written.majorRevision == 1)
            for (index, (_, events)) in watchers.enumerated() {
                let set = try #require(await events.next(seconds: 5), "no set event on node \(index)")
                #expect(set.eventType == .set)
                #expect(set.items.first { $0.key == "cursor" }?.expiresAtMs ?? 0 > 0)
                let expired = try #require(await events.next(seconds: 5), "no expired event on node \(index)")
                #expect(expired.eventType == .expired && expired.items.map(\.key) == ["cursor"])
                #expect(expired.majorRevision == 2 && expired.publisher == "")
            }
            // No node expires it a second time.
            try await Task.sleep(for: .milliseconds(500))
            for (index, (_, events)) in watchers.enumerated() {
                let extra = await events.next(seconds: 0.2)
                #expect(extra == nil, "node \(index) got another event: \(String(describing: extra))")
            }
            for node in 0..<3 {
                let reader = try await nodes[node].client("Reader\(node)")
                let read = try await reader.getChannelMetadata(channel: "room")
                #expect(read.majorRevision == 2 && read.items.map(\.key) == ["topic"], "node \(node): \(read)")
                await reader.close()
            }
            for (watcher, _) in watchers { await watcher.close() }
            await writer.close()
        }
    }

    @Test("a set with a TTL of its own expires once: one expired event with no items on every node, gone everywhere")
    func aSetExpiresOnceAcrossTheCluster() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            let watchers = try await Self.watchers(of: "poll", on: nodes)
            let writer = try await nodes[0].client("Tony")
            let written = try await writer.setChannelMetadata(
                channel: "poll", items: [MetadataItem(key: "q", value: "lunch?"), MetadataItem(key: "a", value: "yes")],
                options: .expiringSet(after: .milliseconds(400)))
            #expect(written.majorRevision == 1 && written.expiresAtMs != 0)
            for (index, (_, events)) in watchers.enumerated() {
                let set = try #require(await events.next(seconds: 5), "no set event on node \(index)")
                #expect(set.eventType == .set && set.expiresAtMs == written.expiresAtMs, "node \(index): \(set)")
                let expired = try #require(await events.next(seconds: 5), "no expired event on node \(index)")
                #expect(expired.eventType == .expired && expired.items.isEmpty, "node \(index): \(expired)")
                #expect(expired.majorRevision == 0 && expired.publisher == "")
            }
            // No node expires it a second time.
            try await Task.sleep(for: .milliseconds(500))
            for (index, (_, events)) in watchers.enumerated() {
                let extra = await events.next(seconds: 0.2)
                #expect(extra == nil, "node \(index) got another event: \(String(describing: extra))")
            }
            for node in 0..<3 {
                let reader = try await nodes[node].client("Reader\(node)")
                let read = try await reader.getChannelMetadata(channel: "poll")
                #expect(read.majorRevision == 0 && read.items.isEmpty && read.expiresAtMs == 0, "node \(node): \(read)")
                await reader.close()
            }
            // Created again on another node: above the expiry's revision (1 written, 2 expired), with no TTL.
            let again = try await nodes[2].client("Ann")
            let created = try await again.setChannelMetadata(
                channel: "poll", items: [MetadataItem(key: "q", value: "dinner?")], options: MetadataWriteOptions(majorRevision: 0))
            #expect(created.majorRevision == 3 && created.expiresAtMs == 0)
            await again.close()
            for (watcher, _) in watchers { await watcher.close() }
            await writer.close()
        }
    }

    /// "soon" may be swept by the first cluster while it shuts down, or by the second at its start: either way it is gone
    /// once, above its revision.
    @Test("a set's deadline is stored in PostgreSQL: a cluster started again keeps it, and a set past it is gone")
    func aSetDeadlineSurvivesARestartOfTheCluster() async throws {
        let postgres = try await TestPostgres.start()
        let deadlines = try await withCluster(nodes: 1, postgres: postgres) { _, nodes in
            let writer = try await nodes[0].client("Tony")
            defer { Task { await writer.close() } }
            let late = try await writer.setChannelMetadata(
                channel: "late", items: [MetadataItem(key: "k", value: "v")], options: .expiringSet(after: .seconds(600)))
            let soon = try await writer.setChannelMetadata(
                channel: "soon", items: [MetadataItem(key: "k", value: "v")], options: .expiringSet(after: .milliseconds(300)))
            return (late.expiresAtMs, soon.expiresAtMs)
        }
        try await Task.sleep(for: .milliseconds(500))
        let outcome = await Result {
            try await withCluster(nodes: 1, postgres: postgres) { _, nodes in
                let reader = try await nodes[0].client("Ann")
                let late = try await reader.getChannelMetadata(channel: "late")
                #expect(late.majorRevision == 1 && late.expiresAtMs == deadlines.0 && deadlines.0 != 0)
                let soon = try await reader.getChannelMetadata(channel: "soon")
                #expect(soon.majorRevision == 0 && soon.items.isEmpty && deadlines.1 != 0)
                // The sweep removes it as a whole: created again, it continues above the expiry's revision.
                var created: UInt64 = 0
                let deadline = ContinuousClock.now + .seconds(10)
                while created == 0, ContinuousClock.now < deadline {
                    do {
                        created = try await reader.setChannelMetadata(
                            channel: "soon", items: [MetadataItem(key: "k", value: "w")],
                            options: MetadataWriteOptions(majorRevision: 0)).majorRevision
                    } catch {
                        try await Task.sleep(for: .milliseconds(50))
                    }
                }
                #expect(created == 3)
                await reader.close()
            }
        }
        await postgres.stop()
        try outcome.get()
    }
}
