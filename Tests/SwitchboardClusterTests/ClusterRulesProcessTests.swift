import SwitchboardClient
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The rules of a single gateway, checked across three real `switchboard --cluster` processes at once (the other
/// suites check each in depth, mostly with in-process nodes).
@Suite("Cluster rules across processes", .serialized, .timeLimit(.minutes(3)))
struct ClusterRulesProcessTests {
    @Test("across three processes: one CAS winner, a lock on one node guards writes on another, offline delivery, a provider on another node")
    func everyRuleHoldsAcrossThreeProcesses() async throws {
        try await ClusterProcessTests.withNodes(3) { _, nodes in
            // A compare-and-set race over the three processes has exactly one winner.
            var racers: [SwitchboardClient] = []
            for index in 0..<6 { racers.append(try await nodes[index % 3].client("racer\(index)")) }
            let seeded = try await racers[0].setChannelMetadata(channel: "race", items: [MetadataItem(key: "k", value: "seed")])
            let expected = Int64(seeded.majorRevision)
            let outcomes = await withTaskGroup(of: ErrorCode?.self) { group in
                for (index, racer) in racers.enumerated() {
                    group.addTask {
                        await ClusterLockTests.code {
                            _ = try await racer.updateChannelMetadata(
                                channel: "race", items: [MetadataItem(key: "k", value: "r\(index)", revision: expected)])
                        }
                    }
                }
                var outcomes: [ErrorCode?] = []
                for await outcome in group { outcomes.append(outcome) }
                return outcomes
            }
            #expect(outcomes.filter { $0 == nil }.count == 1, "outcomes \(outcomes)")
            #expect(outcomes.filter { $0 == .itemRevisionConflict }.count == 5, "outcomes \(outcomes)")

            // A lock held through the first process refuses the rival and guards writes through the second.
            let holder = try await nodes[0].client("Tony")
            let rival = try await nodes[1].client("Ana")
            try await holder.setLock(channel: "doc", name: "edit")
            try await holder.acquireLock(channel: "doc", name: "edit")
            #expect(await ClusterLockTests.code { try await rival.acquireLock(channel: "doc", name: "edit") } == .lockHeld)
            let guarded = await ClusterLockTests.code {
                _ = try await rival.setChannelMetadata(
                    channel: "doc", items: [MetadataItem(key: "body", value: "rival")], lock: "edit")
            }
            #expect(guarded == .lockNotHeld)

            // Offline delivery: subscribed on the first, offline while the second publishes, back on the third.
            let ann = try await nodes[0].client("Ann")
            try await ann.subscribeEvent(publishers: ["Bob"], expirySeconds: 600)
            try await ann.logout()
            let bob = try await nodes[1].client("Bob")
            try await bob.publishEvent(value: 10_020, onlineOnly: false)
            let back = try await nodes[2].client("Ann")
            let events = SubscribedEventIterator(back.subscribedEvents)
            let received = await events.take(2, seconds: 10)
            #expect(received.map(\.value) == [1, 10_020])

            // A provider connected to the first process answers a miss asked through the third.
            let provider = try await nodes[0].client("Directory")
            let requests = PushCollector(provider.makeProviderRequestStream())
            let answering = Task {
                while let request = await requests.next(seconds: 60) {
                    try await provider.answerProvider(
                        request, with: .user(UserInfo(userId: request.id, name: "provided \(request.id)")))
                }
            }
            defer { answering.cancel() }
            try await provider.registerProvider(kinds: [.user])
            let asker = try await nodes[2].client("Asker")
            let provided = try await eventually(seconds: 10) {
                try await asker.getUserInfo(userIDs: ["Ghost"]).users.map(\.name) == ["provided Ghost"]
            }
            #expect(provided, "the provider on another process did not answer")
            for client in racers + [holder, rival, bob, back, provider, asker] { await client.close() }
        }
    }
}
