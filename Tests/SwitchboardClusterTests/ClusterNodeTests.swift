import Logging
import NIOCore
import ServiceLifecycle
import SwitchboardClient
import SwitchboardCluster
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// A node's heartbeat in `sb_node`, and what a node does when it cannot refresh it.
@Suite("Cluster nodes", .serialized, .timeLimit(.minutes(2)))
struct ClusterNodeTests {
    @Test("a running node keeps its heartbeat row fresh and removes it when it stops")
    func aNodeHeartbeatsWhileItRunsAndLeavesWhenItStops() async throws {
        let postgres = try await TestPostgres.start()
        try await withCluster(nodes: 2, postgres: postgres) { postgres, nodes in
            let settled = try await eventually { try await postgres.psql("SELECT count(*) FROM sb_node") == "2" }
            #expect(settled)
            // Refreshed since: each row's heartbeat moves on past its start.
            let refreshed = try await eventually(seconds: 10) {
                try await postgres.psql(
                    "SELECT count(*) FROM sb_node WHERE heartbeat_at >= started_at + interval '1 second'") == "2"
            }
            #expect(refreshed)
            #expect(Set(nodes.map(\.engine.nodeID)).count == 2)
        }
        #expect(try await postgres.psql("SELECT count(*) FROM sb_node") == "0")
        await postgres.stop()
    }

    @Test("a node that cannot refresh its heartbeat stops serving: the process exits with a failure within the node timeout")
    func aNodeThatLosesItsDatabaseStopsServing() async throws {
        // A real `switchboard --cluster` process, so that the node's whole shutdown runs where it would in production.
        try await ClusterProcessTests.withNodes(1) { postgres, nodes in
            let node = nodes[0]
            let client = try await node.client("Tony")
            _ = try await client.whereNow()
            // The database turns the node away: its connections are ended and new ones refused.
            let cutAt = ContinuousClock.now
            try await postgres.psql(
                """
                UPDATE pg_database SET datallowconn = false WHERE datname = 'postgres';
                SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE datname = 'postgres' AND pid <> pg_backend_pid();
                """)
            let status = await node.process.waitForExit(seconds: 30)
            let stoppedAfter = ContinuousClock.now - cutAt
            #expect(status != nil && status != 0, "exit status \(String(describing: status))")
            #expect(stoppedAfter < .seconds(20), "stopped after \(stoppedAfter)")
            await #expect(throws: SwitchboardClientError.self) { _ = try await client.whereNow() }
            await client.close()
        }
    }
}
