import Foundation
import SwitchboardClient
import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The admin change stream on a cluster (`Protocol/SPEC.md` §13.9): a node's stream carries what it learns from the
/// other nodes too, numbered by its own positions; resuming on another node answers `gap`.
@Suite("Cluster change stream", .serialized, .timeLimit(.minutes(3)))
struct ClusterChangeStreamTests {
    @Test("changes made on node 2 (online, join, state, metadata, leave) reach an admin stream on node 1", arguments: PresenceEngine.allCases)
    func changesOnAnotherNodeReachTheStream(engine: PresenceEngine) async throws {
        try await engine.withCluster(nodes: 2) { _, nodes in
            let admin = try await nodes[0].client("ops")
            let changes = admin.makeChangeStream()
            let opened = try await admin.subscribeChanges(channelPattern: "", userPattern: "far-*")
            let user = try await nodes[1].client("far-1")
            try await user.subscribeChannel(channel: "hall", options: ChannelSubscriptionOptions(withPresence: false))
            try await user.setState(channel: "hall", items: [StateItem(key: "seat", value: "7")])
            _ = try await user.setUserMetadata(items: [MetadataItem(key: "k", value: "v")])
            try await user.unsubscribeChannel(channel: "hall")
            let local = try await nodes[0].client("near-1")  // not matching
            _ = try await local.setUserMetadata(items: [MetadataItem(key: "k", value: "v")])

            var got: [Change] = []
            let deadline = ContinuousClock.now + .seconds(20)
            var iterator = changes.makeAsyncIterator()
            while got.count < 5, ContinuousClock.now < deadline {
                guard let change = await iterator.next() else { break }
                got.append(change)
            }
            #expect(got.allSatisfy { $0.userId == "far-1" })
            var membership: [ChangeKind] = []
            var membershipChannels: Set<String> = []
            for change in got where Self.isMembership(change.kind) {
                membership.append(change.kind)
                membershipChannels.insert(change.channel)
            }
            #expect(membership == [ChangeKind.presenceJoin, ChangeKind.presenceState, ChangeKind.presenceLeave])
            #expect(membershipChannels == ["hall"])
            #expect(got.contains { $0.kind == .online && $0.onlineValue == 1 })
            #expect(got.contains { $0.kind == .userMetadata && $0.items.map(\.value) == ["v"] })
            #expect(zip(got, got.dropFirst()).allSatisfy { $0.position < $1.position })
            #expect(got.allSatisfy { $0.position > opened.position })

            // Node 2 numbers its own changes in its own epoch: resuming node 1's position there is a gap.
            let elsewhere = try await nodes[1].client("ops")
            let answer = try await elsewhere.send(
                .subscribeChanges(
                    SubscribeChangesRequest(userPattern: "far-*", resumeEpoch: opened.epoch, resumeFrom: opened.position)))
            guard case .subscribeChanges(let resumed) = answer else { throw ClusterChangeFailure("\(answer)") }
            #expect(resumed.gap && resumed.epoch != opened.epoch)
            for client in [admin, user, local, elsewhere] { await client.close() }
        }
    }
}

extension ClusterChangeStreamTests {
    /// A join, state change or leave of a channel member.
    static func isMembership(_ kind: ChangeKind) -> Bool {
        kind == ChangeKind.presenceJoin || kind == ChangeKind.presenceState || kind == ChangeKind.presenceLeave
    }
}

struct ClusterChangeFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
