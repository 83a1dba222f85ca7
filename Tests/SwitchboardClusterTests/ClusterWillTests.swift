import Foundation
import SwitchboardClient
import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Last wills in a cluster (`Protocol/SPEC.md` §13.10): a will fires once, on the node of its session; a delayed will
/// is cancelled by its user coming back on another node; and the wills of a node killed with `kill -9` are run, once,
/// by the node that sweeps it.
@Suite("Cluster last wills", .serialized, .timeLimit(.minutes(3)))
struct ClusterWillTests {
    static let away = WillAction(
        operation: UInt64(Opcode.setUserMetadata.rawValue), items: [MetadataItem(key: "status", value: "away")])

    /// The status item of `user` as `reader` reads it.
    static func status(of user: String, _ reader: SwitchboardClient) async throws -> MetadataItem? {
        try await reader.getUserMetadata(userID: user).items.first { $0.key == "status" }
    }

    @Test("a delayed will is cancelled when its user comes back on another node; an immediate one runs once")
    func aDelayedWillIsCancelledByTheUserOnAnotherNode() async throws {
        try await withCluster(nodes: 2) { _, nodes in
            let ann = try await nodes[1].client("Ann")
            let tony = try await nodes[0].client("Tony")
            try await tony.setWill([Self.away], delaySeconds: 2)
            await tony.close()  // no logout: the will waits 2 s
            let back = try await nodes[1].client("Tony")
            try await Task.sleep(for: .milliseconds(3_000))
            #expect(try await Self.status(of: "Tony", ann) == nil, "the will ran although Tony came back")

            try await back.setWill([Self.away])
            await back.close()
            #expect(try await eventually(seconds: 10) { try await Self.status(of: "Tony", ann)?.value == "away" })
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await ann.getUserMetadata(userID: "Tony").majorRevision == 1, "the will ran more than once")
            await ann.close()
        }
    }
}

extension ClusterEventProcessTests {
    @Test("kill -9 of a node: the wills of its sessions are run once, by the node that sweeps it")
    func aKilledNodesWillsAreRunOnceBySweepingNode() async throws {
        try await ClusterProcessTests.withNodes(3) { _, nodes in
            let ann = try await nodes[0].client("Ann")
            let tony = try await nodes[1].client("Tony")
            try await tony.setWill([ClusterWillTests.away])
            let rita = try await nodes[1].client("Rita")
            try await rita.setWill([ClusterWillTests.away], delaySeconds: 1)
            let cleared = try await nodes[1].client("Carl")
            try await cleared.setWill([ClusterWillTests.away])
            try await cleared.clearWill()

            nodes[1].process.signal(SIGKILL)
            _ = await nodes[1].process.waitForExit()
            // Seen dead within the node timeout (10 s); one of the two survivors sweeps it and runs the wills.
            #expect(try await eventually(seconds: 30) {
                let tonys = try await ClusterWillTests.status(of: "Tony", ann)?.value
                let ritas = try await ClusterWillTests.status(of: "Rita", ann)?.value
                return tonys == "away" && ritas == "away"
            })
            try await Task.sleep(for: .seconds(2))
            #expect(try await ann.getUserMetadata(userID: "Tony").majorRevision == 1, "Tony's will ran more than once")
            #expect(try await ann.getUserMetadata(userID: "Rita").majorRevision == 1, "Rita's will ran more than once")
            #expect(try await ClusterWillTests.status(of: "Carl", ann) == nil, "a cleared will ran")
            for client in [ann, tony, rita, cleared] { await client.close() }
        }
    }
}
