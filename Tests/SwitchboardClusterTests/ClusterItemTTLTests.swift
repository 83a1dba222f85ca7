import SwitchboardClient
import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Item TTLs in a cluster sharing one PostgreSQL database (`Protocol/SPEC.md` SB-13.1-9): every node sweeps, one
/// transaction wins each expiry, and the one `expired` change reaches subscribers on every node through the feed.
@Suite("Cluster item TTL", .serialized, .timeLimit(.minutes(3)))
struct ClusterItemTTLTests {
    @Test("an item expires once: one expired event on every node, one majorRevision step, gone from every node")
    func anItemExpiresOnceAcrossTheCluster() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            var watchers: [(SwitchboardClient, StorageEventIterator)] = []
            for index in 0..<3 {
                let watcher = try await nodes[index].client("Watcher\(index)")
                let events = StorageEventIterator(watcher.storageEvents)
                try await watcher.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withMetadata: true))
                let snapshot = try #require(await events.next(seconds: 5))
                #expect(snapshot.eventType == .snapshot)
                watchers.append((watcher, events))
            }
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
}
