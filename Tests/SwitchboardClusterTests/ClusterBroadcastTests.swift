import Foundation
import Synchronization
import SwitchboardClient
@testable import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Channel broadcasts on a cluster (`Protocol/SPEC.md` [SB-13.11-8]): a broadcast sent on one node reaches the
/// channel's members on every node, in the order it was sent, and each node keeps its own rewind memory.
@Suite("Cluster broadcasts", .serialized, .timeLimit(.minutes(3)))
struct ClusterBroadcastTests {
    /// Everything a stream delivered so far, collected by a task of its own.
    final class Collected: Sendable {
        private final class Box: Sendable {
            let items = Mutex<[ChannelBroadcast]>([])
        }

        private let box = Box()
        private let task: Task<Void, Never>

        init(_ stream: AsyncStream<ChannelBroadcast>) {
            let box = self.box
            self.task = Task { for await item in stream { box.items.withLock { $0.append(item) } } }
        }

        deinit { self.task.cancel() }

        var all: [ChannelBroadcast] { self.box.items.withLock { $0 } }

        /// Waits until `condition` holds, at most `seconds`; returns whether it did.
        func wait(seconds: Double, until condition: ([ChannelBroadcast]) -> Bool) async -> Bool {
            let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
            while !condition(self.all) {
                if ContinuousClock.now >= deadline { return false }
                try? await Task.sleep(for: .milliseconds(10))
            }
            return true
        }
    }

    @Test("a broadcast on node 1 reaches members on node 2 in order, not a non-member there, and node 2 can rewind it")
    func broadcastsReachMembersOnTheOtherNode() async throws {
        try await PresenceEngine.postgres.withCluster(nodes: 2) { _, nodes in
            let far = try await nodes[1].client("far")
            let farOther = try await nodes[1].client("far-other")  // in another channel
            let near = try await nodes[0].client("near")
            let sender = try await nodes[0].client("sender")
            let atFar = Collected(far.makeChannelBroadcastStream())
            let atFarOther = Collected(farOther.makeChannelBroadcastStream())
            let atNear = Collected(near.makeChannelBroadcastStream())
            try await far.subscribeChannel(channel: "board", options: ChannelSubscriptionOptions(withPresence: false))
            try await farOther.subscribeChannel(channel: "hall", options: ChannelSubscriptionOptions(withPresence: false))
            try await near.subscribeChannel(channel: "board", options: ChannelSubscriptionOptions(withPresence: false))

            // Node 2 may still be starting to listen: probe until a broadcast gets across.
            var crossed = false
            for _ in 0..<50 where !crossed {
                _ = try await sender.broadcast(channel: "board", data: "probe", noRewind: true)
                crossed = await atFar.wait(seconds: 0.2) { !$0.isEmpty }
            }
            try #require(crossed, "no broadcast reached node 2")
            for index in 0..<20 { _ = try await sender.broadcast(channel: "board", data: "m\(index)") }
            let expected = (0..<20).map { "m\($0)" }
            for (name, collected) in [("far (node 2)", atFar), ("near (node 1)", atNear)] {
                _ = await collected.wait(seconds: 20) { $0.filter { $0.data != "probe" }.count >= 20 }
                let got = collected.all.filter { $0.data != "probe" }
                #expect(got.map(\.data) == expected, "\(name) got \(got.map(\.data))")
                #expect(got.allSatisfy { $0.sender == "sender" && $0.channel == "board" }, "\(name)")
                #expect(zip(got, got.dropFirst()).allSatisfy { $0.sequence < $1.sequence }, "\(name)")
            }
            // Node 2 keeps what it delivered (not the noRewind probes), under its own sequences.
            let rewound = try await far.rewindBroadcasts(channel: "board")
            #expect(rewound.broadcasts.map(\.data) == expected)
            // A member of another channel on node 2 got nothing.
            try await Task.sleep(for: .milliseconds(300))
            #expect(atFarOther.all.isEmpty, "a member of another channel got \(atFarOther.all)")
            for client in [far, farOther, near, sender] { await client.close() }
        }
    }
}

/// The `NOTIFY` payload of a relayed broadcast: base64 as RFC 4648 has it, and the largest broadcast fits.
@Suite struct BroadcastNotifyPayloadTests {
    @Test func base64MatchesTheRFCTestVectorsAndRefusesWhatIsNotBase64() {
        let vectors = [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy")]
        for (plain, encoded) in vectors {
            #expect(Base64Text.encode(Array(plain.utf8)) == encoded)
            #expect(Base64Text.decode(Substring(encoded)) == Array(plain.utf8))
        }
        for bad in ["Zg=", "Z===", "Zm9v!A==", "Zg==Zg=="] {
            #expect(Base64Text.decode(Substring(bad)) == nil, "\(bad)")
        }
    }

    @Test func theLargestBroadcastFitsANotificationAndComesBackWhole() throws {
        let broadcast = ChannelBroadcast(
            channel: String(repeating: "c", count: 64), channelType: .stream, sequence: UInt64.max,
            sender: String(repeating: "u", count: 64), data: String(repeating: "\u{10FFFF}", count: 1024),
            timestampMs: UInt64.max)
        let payload = NotifyPayload.encode(broadcast, keep: false, node: "0123456789abcdef0123456789abcdef")
        #expect(payload.utf8.count <= NotifyPayload.maxBytes)
        let decoded = try #require(NotifyPayload.decode(payload))
        #expect(decoded.node == "0123456789abcdef0123456789abcdef")
        #expect(decoded.broadcast == broadcast && !decoded.keep)
        #expect(NotifyPayload.decode(NotifyPayload.encode(broadcast, keep: true, node: "n"))?.keep == true)
        #expect(NotifyPayload.decode("no-space") == nil)
        #expect(NotifyPayload.decode("node k!!!!") == nil)
        #expect(NotifyPayload.decode("node xZm9v") == nil)
    }
}
