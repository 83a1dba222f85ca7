import SwitchboardClient
import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Metadata across the nodes of a cluster sharing one PostgreSQL database, over real sockets: every rule of a single
/// gateway holds whichever node a client is on.
@Suite("Cluster metadata", .serialized, .timeLimit(.minutes(3)))
struct ClusterMetadataTests {
    @Test("a storage event written on one node reaches a subscriber on another, and every node reads the write")
    func aStorageEventWrittenOnOneNodeReachesASubscriberOnAnother() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let events = StorageEventIterator(watcher.storageEvents)
            try await watcher.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withMetadata: true))
            let snapshot = try #require(await events.next(seconds: 5))
            #expect(snapshot.eventType == .snapshot && snapshot.items.isEmpty)

            let writer = try await nodes[0].client("Tony")
            let written = try await writer.setChannelMetadata(
                channel: "room", items: [MetadataItem(key: "topic", value: "launch")],
                options: MetadataWriteOptions(recordAuthor: true))
            let event = try #require(await events.next(seconds: 5), "no storage event on the other node")
            #expect(event.eventType == .set && event.target == "room" && event.publisher == "Tony")
            #expect(event.majorRevision == written.majorRevision)
            #expect(event.items.map(\.value) == ["launch"] && event.items.first?.authorUserId == "Tony")

            let reader = try await nodes[2].client("Ana")
            let settled = try await eventually {
                let read = try await reader.getChannelMetadata(channel: "room")
                return read.majorRevision == written.majorRevision && read.items.first?.value == "launch"
            }
            #expect(settled)
            for client in [watcher, writer, reader] { await client.close() }
        }
    }

    @Test("concurrent compare-and-set writes spread over three nodes have exactly one winner")
    func aCompareAndSetRaceAcrossNodesHasExactlyOneWinner() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            var clients: [SwitchboardClient] = []
            for index in 0..<9 { clients.append(try await nodes[index % 3].client("racer\(index)")) }
            let seeded = try await clients[0].setChannelMetadata(
                channel: "race", items: [MetadataItem(key: "k", value: "seed")])
            let revision = Int64(seeded.majorRevision)
            for round in 0..<3 {
                // Item CAS: each racer updates "k" expecting the revision all of them last saw.
                let expected = revision + Int64(round)
                let outcomes = await withTaskGroup(of: ErrorCode?.self) { group in
                    for (index, client) in clients.enumerated() {
                        group.addTask {
                            do {
                                _ = try await client.updateChannelMetadata(
                                    channel: "race", items: [MetadataItem(key: "k", value: "r\(round)-\(index)", revision: expected)])
                                return nil
                            } catch let error as SwitchboardClientError {
                                return error.code
                            } catch {
                                return .internal
                            }
                        }
                    }
                    var outcomes: [ErrorCode?] = []
                    for await outcome in group { outcomes.append(outcome) }
                    return outcomes
                }
                #expect(outcomes.filter { $0 == nil }.count == 1, "round \(round): \(outcomes)")
                #expect(outcomes.compactMap { $0 }.allSatisfy { $0 == .itemRevisionConflict }, "round \(round): \(outcomes)")
            }
            // Whole-set CAS: create-only (majorRevision 0) from every node at once.
            let creations = await withTaskGroup(of: Bool.self) { group in
                for (index, client) in clients.enumerated() {
                    group.addTask {
                        (try? await client.setChannelMetadata(
                            channel: "created-once", items: [MetadataItem(key: "owner", value: "\(index)")],
                            options: MetadataWriteOptions(majorRevision: 0))) != nil
                    }
                }
                var wins = 0
                for await won in group where won { wins += 1 }
                return wins
            }
            #expect(creations == 1)
            for client in clients { await client.close() }
        }
    }

    @Test("a node whose change feed connection is killed catches up from its cursor with no gap")
    func aRestartedFeedConnectionCatchesUpWithNoGap() async throws {
        try await withCluster(nodes: 2) { postgres, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let events = StorageEventIterator(watcher.storageEvents)
            try await watcher.subscribeChannel(channel: "feed", options: ChannelSubscriptionOptions(withMetadata: true))
            _ = try #require(await events.next(seconds: 5))
            let writer = try await nodes[0].client("Tony")
            try await writer.setChannelMetadata(channel: "feed", items: [MetadataItem(key: "n", value: "0")])
            #expect(await events.next(seconds: 5)?.items.first?.value == "0")

            let killed = try await postgres.psql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE 'switchboard-feed-%'")
            #expect(killed == "2")
            for n in 1...50 {
                try await writer.setChannelMetadata(channel: "feed", items: [MetadataItem(key: "n", value: "\(n)")])
            }
            var seen: [String] = []
            while seen.count < 50, let event = await events.next(seconds: 10) {
                seen.append(event.items.first?.value ?? "")
            }
            #expect(seen == (1...50).map { "\($0)" })
            #expect(try await watcher.getChannelMetadata(channel: "feed").items.first?.value == "50")
            await watcher.close()
            await writer.close()
        }
    }

    @Test("a resume on another node than the writes' gives the exact changes (the feed carried the removals); from the future the whole set with resumeFailed")
    func aResumeOnAnotherNodeGivesTheChanges() async throws {
        try await withCluster(nodes: 2) { _, nodes in
            let writer = try await nodes[0].client("Tony")
            let seeded = try await writer.setUserMetadata(
                items: (0..<20).map { MetadataItem(key: "k\($0)", value: "v") })
            try await writer.removeUserMetadata(items: [MetadataItem(key: "k3"), MetadataItem(key: "k4")])
            try await writer.setUserMetadata(items: [MetadataItem(key: "k5", value: "w"), MetadataItem(key: "k9", value: "w")])
            let last = try await writer.setUserMetadata(items: [MetadataItem(key: "new", value: "n")])

            let watcher = try await nodes[1].client("Ana")
            let settled = try await eventually {
                try await watcher.getUserMetadata(userID: "Tony").majorRevision == last.majorRevision
            }
            #expect(settled)
            let events = StorageEventIterator(watcher.storageEvents)
            try await watcher.subscribeUserMetadata(userID: "Tony", sinceRevision: seeded.majorRevision)
            let resumed = try #require(await events.next(seconds: 5))
            #expect(resumed.eventType == .snapshot && resumed.resumedFrom == seeded.majorRevision && !resumed.resumeFailed)
            #expect(resumed.majorRevision == last.majorRevision)
            #expect(resumed.items.map(\.key) == ["k5", "k9", "new"] && resumed.removedKeys == ["k3", "k4"])

            try await watcher.subscribeUserMetadata(userID: "Tony", sinceRevision: last.majorRevision + 1)
            let future = try #require(await events.next(seconds: 5))
            #expect(future.resumeFailed && future.items.count == 19 && future.resumedFrom == 0)
            await writer.close()
            await watcher.close()
        }
    }

    @Test("a node started after writes loads them, and removals reach the other nodes")
    func aLateNodeLoadsTheClusterAndRemovalsPropagate() async throws {
        try await withCluster(nodes: 2) { _, nodes in
            let writer = try await nodes[0].client("Tony")
            try await writer.setUserMetadata(items: [MetadataItem(key: "a", value: "1"), MetadataItem(key: "b", value: "2")])
            let reader = try await nodes[1].client("Ana")
            let settled2 = try await eventually {
                try await reader.getUserMetadata(userID: "Tony").items.map(\.key) == ["a", "b"]
            }
            #expect(settled2)
            try await writer.removeUserMetadata(items: [MetadataItem(key: "a")])
            let settled3 = try await eventually { try await reader.getUserMetadata(userID: "Tony").items.map(\.key) == ["b"] }
            #expect(settled3)
            try await writer.removeUserMetadata(items: [])
            let settled4 = try await eventually { try await reader.getUserMetadata(userID: "Tony").majorRevision == 0 }
            #expect(settled4)
            await writer.close()
            await reader.close()
        }
    }

    @Test("a change far larger than NOTIFY's 8000-byte payload reaches another node whole (the feed row carries it)")
    func aLargeChangeCrossesNodesWhole() async throws {
        try await withCluster(nodes: 2) { _, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let events = StorageEventIterator(watcher.storageEvents)
            try await watcher.subscribeChannel(channel: "big", options: ChannelSubscriptionOptions(withMetadata: true))
            #expect(await events.next(seconds: 5)?.eventType == .snapshot)
            // 3 bytes per character: close to the set's 16 KB limit, twice NOTIFY's limit.
            let value = String(repeating: "界", count: 5_000)
            let writer = try await nodes[0].client("Tony")
            _ = try await writer.setChannelMetadata(channel: "big", items: [MetadataItem(key: "k", value: value)])
            let event = try #require(await events.next(seconds: 5), "the large change did not reach the other node")
            #expect(event.items.first?.value == value)
            #expect(try await watcher.getChannelMetadata(channel: "big").items.first?.value == value)
            await writer.close()
            await watcher.close()
        }
    }
}
