import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The inspector on a cluster node: its channels, members, states, metadata and online flags are the cluster's (the
/// command areas answer from the shared engines); its sessions and online users are the node's own.
@Suite("Cluster inspector", .serialized, .timeLimit(.minutes(3)))
struct ClusterInspectorTests {
    /// `GET path` from the metrics endpoint at `port` (open development mode: no token), as a JSON object.
    static func get(_ path: String, port: Int) async throws -> [String: Any] {
        let text = try await Task.detached { () throws -> String in
            let socket = try connectedLoopbackSocket(port: port)
            defer { close(socket) }
            let request = Array("GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
            _ = request.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            var received: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline {
                let count = recv(socket, &chunk, chunk.count, 0)
                if count == 0 { break }
                if count > 0 { received += chunk[0..<count] }
            }
            return String(decoding: received, as: UTF8.self)
        }.value
        let body = try #require(text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) }, "\(text)")
        #expect(text.hasPrefix("HTTP/1.1 200 OK"), "\(path): \(text)")
        return try #require(try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])
    }

    @Test("a node's inspector shows a member, state and metadata of another node's client; sessions only its own")
    func anotherNodesClientIsSeen() async throws {
        try await withCluster(nodes: 2, configure: { $0.metricsPort = 0 }) { _, nodes in
            let ann = try await nodes[0].client("ann")
            try await ann.subscribeChannel(channel: "lobby")
            try await ann.setState(channel: "lobby", items: [StateItem(key: "mood", value: "happy")])
            _ = try await ann.setChannelMetadata(channel: "lobby", items: [MetadataItem(key: "topic", value: "shared")])
            let here = try #require(nodes[0].running.metricsAddress?.port)
            let there = try #require(nodes[1].running.metricsAddress?.port)

            let seen = try await eventually(seconds: 10) {
                let channel = try await Self.get("/inspector/api/channel?name=lobby", port: there)
                let members = channel["members"] as? [[String: Any]] ?? []
                let items = (channel["metadata"] as? [String: Any])?["items"] as? [[String: Any]] ?? []
                return channel["occupancy"] as? Int == 1 && members.first?["userId"] as? String == "ann"
                    && (members.first?["state"] as? [[String: String]]) == [["key": "mood", "value": "happy"]]
                    && items.first?["value"] as? String == "shared"
            }
            #expect(seen, "node 1's inspector does not show node 0's member, state and metadata")
            let channels = try await Self.get("/inspector/api/channels", port: there)
            let listed = (channels["channels"] as? [[String: Any]])?.first
            #expect(listed?["name"] as? String == "lobby" && listed?["users"] as? Int == 1)

            let user = try await Self.get("/inspector/api/user?id=ann", port: there)
            #expect(user["online"] as? Bool == true)
            #expect((user["channels"] as? [[String: Any]])?.first?["name"] as? String == "lobby")
            #expect((user["sessions"] as? [Any])?.isEmpty == true, "ann has no session on node 1")
            let local = try await Self.get("/inspector/api/user?id=ann", port: here)
            #expect((local["sessions"] as? [Any])?.count == 1)

            let elsewhere = try await Self.get("/inspector/api/users", port: there)
            #expect(elsewhere["total"] as? Int == 0)
            let own = try await Self.get("/inspector/api/users", port: here)
            #expect((own["users"] as? [[String: Any]])?.map { $0["userId"] as? String } == ["ann"])
            await ann.close()
        }
    }
}
