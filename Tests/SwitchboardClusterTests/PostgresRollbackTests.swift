import Logging
import PostgresNIO
import SwitchboardTestSupport
import Testing

@testable import SwitchboardCluster

/// How a node ends a transaction that failed (`PostgresConnection.rollBack(after:logger:)`), against a real
/// PostgreSQL: postgres-nio never answers a statement written to a connection whose channel has closed, so a ROLLBACK
/// sent after the server ended the session used to wait forever (CI saw a node's profile writer hang so in its
/// shutdown).
@Suite("PostgreSQL rollback")
struct PostgresRollbackTests {
    @Test("a rollback after the server ended the session returns at once, and the transaction is gone")
    func aRollbackAfterTheSessionEndedReturns() async throws {
        try await Self.withConnection { connection, postgres, logger in
            try await connection.query("BEGIN", logger: logger)
            try await connection.query("CREATE TABLE doomed (id int)", logger: logger)
            let error = try await #require(throws: (any Error).self) {
                try await connection.query("SELECT pg_terminate_backend(pg_backend_pid())", logger: logger).collect()
            }
            // Wait until the channel has closed: a statement written now is the one that was never answered.
            let deadline = ContinuousClock.now + .seconds(10)
            while !connection.isClosed, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            #expect(connection.isClosed)
            let returned = await finishes(by: .now + .seconds(5)) {
                await connection.rollBack(after: error, logger: logger)
            }
            #expect(returned, "the rollback waited on a closed connection")
            #expect(try await postgres.psql("SELECT count(*) FROM pg_tables WHERE tablename = 'doomed'") == "0")
        }
    }

    @Test("a rollback after a statement failed on a live connection ends the transaction and keeps the connection")
    func aRollbackOnALiveConnectionEndsTheTransaction() async throws {
        try await Self.withConnection { connection, postgres, logger in
            try await connection.query("BEGIN", logger: logger)
            try await connection.query("CREATE TABLE undone (id int)", logger: logger)
            let error = try await #require(throws: (any Error).self) {
                try await connection.query("SELECT 1 / 0", logger: logger).collect()
            }
            await connection.rollBack(after: error, logger: logger)
            #expect(!connection.isClosed)
            // Out of the failed transaction: the connection takes statements again.
            var value: Int32 = 0
            for try await row in try await connection.query("SELECT 7", logger: logger).decode(Int32.self) { value = row }
            #expect(value == 7)
            #expect(try await postgres.psql("SELECT count(*) FROM pg_tables WHERE tablename = 'undone'") == "0")
        }
    }

    private static func withConnection(
        _ body: (PostgresConnection, TestPostgres, Logger) async throws -> Void
    ) async throws {
        let postgres = try await TestPostgres.start()
        var logger = Logger(label: "rollback-test")
        logger.logLevel = .critical
        do {
            let location = try PostgresLocation(url: postgres.url)
            let connection = try await PostgresConnection.connect(
                configuration: location.configuration(applicationName: "switchboard-rollback-test"), id: 1, logger: logger)
            do {
                try await body(connection, postgres, logger)
            } catch {
                connection.closeNow()
                throw error
            }
            connection.closeNow()
        } catch {
            await postgres.stop()
            throw error
        }
        await postgres.stop()
    }
}
