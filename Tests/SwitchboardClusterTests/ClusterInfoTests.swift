import Foundation
import SwitchboardClient
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The `info` operation on a cluster of real `switchboard --cluster` processes: every node is listed with the address
/// it advertises, its heartbeat and its change feed lag; a node that stops heart-beating (SIGSTOP) shows as not alive
/// until it resumes.
@Suite("Cluster info", .serialized, .timeLimit(.minutes(3)))
struct ClusterInfoTests {
    static func info(_ client: SwitchboardClient) async throws -> InfoResponse {
        try await client.info()
    }

    @Test("info on any node lists every node with its address and a lag figure; a paused node shows as not alive, then alive again")
    func infoListsEveryNodeWithItsLag() async throws {
        try await ClusterProcessTests.withNodes(3) { postgres, nodes in
            let observer = try await nodes[1].client("Observer")
            let writer = try await nodes[2].client("Writer")
            for value in ["1", "2", "3"] {
                try await writer.setUserMetadata(items: [MetadataItem(key: "k", value: value)])
            }
            let addresses = Set(nodes.map { "127.0.0.1:\($0.port)" })
            // Every node heart-beats (1 s) with its address and how far it applied the feed, which holds the writes.
            let listed = try await eventually(seconds: 15) {
                let info = try await Self.info(observer)
                return Set(info.nodes.map(\.address)) == addresses && info.feedPosition > 0
                    && info.nodes.allSatisfy { $0.alive && $0.appliedPosition == info.feedPosition && $0.lagPositions == 0 }
            }
            let info = try await Self.info(observer)
            #expect(listed, "\(info)")
            #expect(info.nodes.count == 3)
            #expect(info.nodes.filter(\.local).map(\.nodeId) == [info.nodeId] && !info.nodeId.isEmpty)
            #expect(info.nodes.first { $0.local }?.address == "127.0.0.1:\(nodes[1].port)")
            #expect(info.nodes.map(\.nodeId) == info.nodes.map(\.nodeId).sorted())
            #expect(info.metadataSets == 1 && info.metadataItems == 1)
            #expect(info.sessions == 1 && info.writesTotal == 0, "the writes were made on another node: \(info)")
            let sbNode = try await postgres.psql("SELECT count(*) FROM sb_node WHERE applied_position > 0")
            #expect(sbNode == "3")

            // Node 0 stops heart-beating: after three missed heartbeats the others list it as not alive (it is swept
            // only after the node timeout, 10 s); resumed in time, it is alive again.
            let paused = "127.0.0.1:\(nodes[0].port)"
            nodes[0].process.signal(SIGSTOP)
            let stopped = ContinuousClock.now
            let seenDead = try await eventually(seconds: 8) {
                try await Self.info(observer).nodes.first { $0.address == paused }?.alive == false
            }
            let after = ContinuousClock.now - stopped
            nodes[0].process.signal(SIGCONT)
            let whilePaused = try await Self.info(observer)
            #expect(seenDead, "\(whilePaused)")
            #expect(after >= .seconds(2), "listed as not alive after \(after)")
            let back = try await eventually(seconds: 8) {
                try await Self.info(observer).nodes.first { $0.address == paused }?.alive == true
            }
            let resumed = try await Self.info(observer)
            #expect(back, "\(resumed)")
            await observer.close()
            await writer.close()
        }
    }
}
