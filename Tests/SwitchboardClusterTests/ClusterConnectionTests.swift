import Logging
import PostgresNIO
import SwitchboardClient
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

@testable import SwitchboardCluster

/// A node's connections to PostgreSQL (``PostgresPool``), against a real server: how many a node opens, and what a
/// transaction does when its connection is ended under it (postgres-nio never answers a statement written to a
/// closed connection, so a careless caller would wait forever).
@Suite("Cluster connections", .serialized, .timeLimit(.minutes(3)))
struct ClusterConnectionTests {
    @Test("a busy node holds at most its pool's connections, the change feed's and the two of broadcasts")
    func aBusyNodeHoldsAtMostItsPoolAndTheFeed() async throws {
        try await withCluster(nodes: 1) { postgres, nodes in
            let node = nodes[0]
            let pool = node.engine.pool
            let client = try await node.client("Ana")
            let connectionsOfNode =
                "SELECT count(*) FROM pg_stat_activity WHERE substring(application_name FROM '[^-]*$') = '\(node.engine.nodeID)'"
            // Many more transactions at once than the pool has connections, beside the gateway's own writes.
            // The most connections of the node seen at once.
            let seen = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<(pool.size * 3) {
                    group.addTask {
                        _ = try await pool.withTransaction("a test transaction", timeout: .seconds(30)) { transaction in
                            try await transaction.query("SELECT pg_sleep(0.2)")
                        }
                        return 0
                    }
                }
                group.addTask {
                    for index in 0..<20 {
                        _ = try await client.setChannelMetadata(
                            channel: "busy", items: [MetadataItem(key: "k\(index)", value: "v")])
                    }
                    return 0
                }
                group.addTask {
                    var peak = 0
                    for _ in 0..<15 {
                        peak = max(peak, Int(try await postgres.psql(connectionsOfNode)) ?? -1)
                        try await Task.sleep(for: .milliseconds(50))
                    }
                    return peak
                }
                return try await group.reduce(0, max)
            }
            let names = try await postgres.psql(
                """
                SELECT string_agg(DISTINCT substring(application_name FROM '^switchboard-([a-z]+)-'), ',')
                FROM pg_stat_activity WHERE substring(application_name FROM '[^-]*$') = '\(node.engine.nodeID)'
                """)
            await client.close()
            // The pool filled up (the load asked for three times its size), and no connection was opened beside it.
            #expect(seen > pool.size / 2, "the load did not use the pool: \(seen) connections")
            #expect(seen <= pool.size + 3, "\(seen) connections for a pool of \(pool.size), the feed and broadcasts")
            #expect(
                Set(names.split(separator: ",").map(String.init)).isSubset(of: ["node", "feed", "broadcast"]), "\(names)")
        }
    }

    @Test("a transaction whose session the server ends fails within its bound, and the next one gets a new connection")
    func aTransactionWhoseSessionEndsFailsAndTheNextSucceeds() async throws {
        try await Self.withPool { pool, postgres in
            let ended = EndedSession()
            let returned = await finishes(by: .now + .seconds(10)) {
                do {
                    try await pool.withTransaction("a doomed transaction", timeout: .seconds(30)) { transaction in
                        try await transaction.query("CREATE TABLE doomed (id int)")
                        let pid = try await transaction.query("SELECT pg_backend_pid()").first!.decode(Int32.self)
                        ended.pid.withLock { $0 = pid }
                        _ = try await postgres.psql("SELECT pg_terminate_backend(\(pid), 5000)")
                        try await transaction.query("INSERT INTO doomed VALUES (1)")
                    }
                    Issue.record("the transaction committed on an ended session")
                } catch {
                    #expect(ConnectionLoss.caused(error), "\(error)")
                }
            }
            #expect(returned, "the transaction waited on its ended connection")
            let next = try await pool.withTransaction("the next transaction") { transaction in
                try await transaction.query("SELECT pg_backend_pid()").first!.decode(Int32.self)
            }
            #expect(next != ended.pid.withLock { $0 })
            #expect(try await postgres.psql("SELECT count(*) FROM pg_tables WHERE tablename = 'doomed'") == "0")
        }
    }

    @Test("a statement on a connection that closed between two statements fails at once instead of waiting")
    func aStatementOnAClosedConnectionFails() async throws {
        try await Self.withPool { pool, postgres in
            let returned = await finishes(by: .now + .seconds(10)) {
                do {
                    try await pool.withTransaction("a transaction", timeout: .seconds(30)) { transaction in
                        let pid = try await transaction.query("SELECT pg_backend_pid()").first!.decode(Int32.self)
                        _ = try await postgres.psql("SELECT pg_terminate_backend(\(pid), 5000)")
                        // Until the channel has closed: a statement written now is one postgres-nio never answers.
                        let deadline = ContinuousClock.now + .seconds(5)
                        while !transaction.connection.isClosed, ContinuousClock.now < deadline {
                            try await Task.sleep(for: .milliseconds(10))
                        }
                        #expect(transaction.connection.isClosed)
                        try await transaction.query("SELECT 1")
                    }
                    Issue.record("a statement on a closed connection succeeded")
                } catch {
                    #expect(error is ConnectionClosed, "\(error)")
                }
            }
            #expect(returned, "the statement waited on a closed connection")
            let value = try await pool.withConnection("the next use") { lease in
                try await lease.query("SELECT 7").first!.decode(Int32.self)
            }
            #expect(value == 7)
        }
    }

    /// A pool of 2 connections of a node named `test…` on a server of the test's own.
    private static func withPool(_ body: (PostgresPool, TestPostgres) async throws -> Void) async throws {
        let postgres = try await TestPostgres.start()
        var logger = Logger(label: "connection-test")
        logger.logLevel = .critical
        var location = try PostgresLocation(url: postgres.url)
        location.node = NodeLiveness(nodeID: "7e57", timeout: .seconds(30))
        let pool = PostgresPool(location: location, size: 2, logger: logger)
        do {
            try await body(pool, postgres)
        } catch {
            await pool.shutdown()
            await postgres.stop()
            throw error
        }
        await pool.shutdown()
        await postgres.stop()
    }
}

/// The server process of the session a test ended.
private final class EndedSession: Sendable {
    let pid = Mutex<Int32?>(nil)
}
