import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// A node's connections to PostgreSQL: one postgres-nio `PostgresClient` of at most ``size`` connections, each
/// named `switchboard-node-NODE` in `pg_stat_activity` and carrying the node's session parameters
/// (``PostgresLocation/sessionParameters``). Every writer and reader of the node takes its connections here; only the
/// change feed's `LISTEN` keeps a connection of its own (a `LISTEN` belongs to its session).
///
/// The client runs from the first use (the engines load before the gateway runs its services) until
/// ``PoolService`` stops it, which the node's services stop last.
final class PostgresPool: Sendable {
    /// How many connections a node opens at most.
    static let defaultSize = 10

    /// The most connections the pool opens.
    let size: Int
    private let client: PostgresClient
    private let node: NodeLiveness?
    private let logger: Logger
    private let runner = Mutex<RunState>(.idle)
    private let replacements = Mutex(Replacements())
    private let onReconnect: (@Sendable () -> Void)?

    /// Which connections the pool has leased, how many of them closed, and how many new ones replaced those.
    private struct Replacements {
        var seen = Set<PostgresConnection.ID>()
        var closed = 0
        var replaced = 0
    }

    private enum RunState {
        case idle
        case running(Task<Void, Never>)
        case stopped
    }

    /// A pool for the node of `location` (its ``PostgresLocation/node``), of at most `size` connections.
    ///
    /// - Parameter onReconnect: Called each time a connection the pool had not leased before is leased after one it
    ///   had leased closed (a restart of the database, a connection lost or closed at a deadline): a metric.
    init(
        location: PostgresLocation, size: Int = PostgresPool.defaultSize, onReconnect: (@Sendable () -> Void)? = nil,
        logger: Logger
    ) {
        var configuration = PostgresClient.Configuration(
            host: location.host, port: location.port, username: location.username, password: location.password,
            database: location.database, tls: .disable)
        configuration.options.maximumConnections = size
        configuration.options.minimumConnections = 0
        // Idle connections stay (at most `size`): a connection that closes is then one that was lost.
        configuration.options.connectionIdleTimeout = .seconds(600)
        configuration.options.connectTimeout = ClusterDeadlines.connect
        // The node's own keep-alive is its heartbeat; an idle connection is checked when it is leased again.
        configuration.options.keepAliveBehavior = nil
        configuration.options.additionalStartupParameters = location.configuration.options.additionalStartupParameters
        self.size = size
        self.onReconnect = onReconnect
        self.node = location.node
        self.logger = logger
        self.client = PostgresClient(configuration: configuration, backgroundLogger: logger)
    }

    /// Starts the client if it does not run yet (once stopped, it stays stopped and leases fail).
    private func start() {
        self.runner.withLock { state in
            guard case .idle = state else { return }
            let client = self.client
            // Detached: not under the graceful shutdown of whatever task started it (the gateway's own, when it runs
            // in a service group), which would close the pool before the node's writers flushed. PoolService stops it.
            state = .running(Task.detached { await client.run() })
        }
    }

    /// Counts a connection that replaces one that closed (``onReconnect``), and watches a new one's closing.
    private func noteLeased(_ connection: PostgresConnection) {
        let (isNew, replacing) = self.replacements.withLock { state -> (Bool, Bool) in
            guard state.seen.insert(connection.id).inserted else { return (false, false) }
            guard state.closed > state.replaced else { return (true, false) }
            state.replaced += 1
            return (true, true)
        }
        if replacing { self.onReconnect?() }
        guard isNew else { return }
        let id = connection.id
        connection.closeFuture.whenComplete { _ in
            self.replacements.withLock { state in
                if state.seen.remove(id) != nil { state.closed += 1 }
            }
        }
    }

    /// Stops the client: its connections close, waiting leases fail.
    func shutdown() async {
        let task = self.runner.withLock { state -> Task<Void, Never>? in
            defer { state = .stopped }
            guard case .running(let task) = state else { return nil }
            return task
        }
        task?.cancel()
        await task?.value
    }

    /// Runs `body` on a connection of the pool, in one transaction that ends by `timeout` from now (waiting for a
    /// connection included): `BEGIN`, `body`, `COMMIT`, and on any error the transaction is ended
    /// (``PostgresConnection/rollBack(after:logger:)``: never on a lost connection, at most a second).
    ///
    /// The connection goes back to the pool only when it is healthy: after a deadline, a cancellation or a lost
    /// connection it is closed, and the pool has seen it close, before it is released, so no later transaction
    /// gets it. `BEGIN` and `COMMIT` race the connection's closing (``PostgresConnection/query(_:by:logger:_:)``), and
    /// the statements of `body` should be bounded the same way (``PostgresTransaction/query(_:)``): postgres-nio never
    /// answers a statement written to a closed connection.
    ///
    /// - Throws: ``NodeFenced`` before anything is written when the node may not write any more; ``DeadlineExceeded``;
    ///   ``PostgresCommitOutcomeUnknown`` when the connection failed while the `COMMIT` was unanswered; the error
    ///   `body` threw.
    @discardableResult
    func withTransaction<Result: Sendable>(
        _ what: String, timeout: Duration = ClusterDeadlines.transaction,
        _ body: (PostgresTransaction) async throws -> Result
    ) async throws -> Result {
        try await self.withConnection(what, timeout: timeout) { transaction in
            let connection = transaction.connection
            try await connection.query("BEGIN", by: transaction.deadline, logger: self.logger, what)
            let result: Result
            do {
                result = try await body(transaction)
            } catch {
                if !(await connection.rollBack(after: error, logger: self.logger)) {
                    await Self.closeBeforeRelease(connection)
                }
                throw error
            }
            do {
                _ = try await connection.query("COMMIT", by: transaction.deadline, logger: self.logger, what)
            } catch let error as PSQLError where error.serverInfo?[.severity] == "ERROR" {
                throw error  // the server refused the COMMIT: the transaction rolled back
            } catch {
                throw PostgresCommitOutcomeUnknown(underlying: error)
            }
            return result
        }
    }

    /// Runs `body` on a connection of the pool, outside a transaction, by `timeout` from now (waiting for a
    /// connection included). The connection goes back to the pool as ``withTransaction(_:timeout:_:)`` says.
    ///
    /// - Throws: ``NodeFenced`` when the node may not write any more, ``DeadlineExceeded``, the error `body` threw.
    @discardableResult
    func withConnection<Result: Sendable>(
        _ what: String, timeout: Duration = ClusterDeadlines.transaction,
        _ body: (PostgresTransaction) async throws -> Result
    ) async throws -> Result {
        self.start()
        let deadline = ContinuousClock.now + timeout
        let logger = self.logger
        let node = self.node
        // A fenced node waits for no connection: what it would write is refused anyway (its shutdown then does not
        // wait out a deadline per service for a database that turned it away).
        try node?.checkAlive()
        // Waiting for a connection is bounded too: the lease is cancelled at the deadline.
        let leased = LeaseFlag()
        return try await withoutActuallyEscaping(body) { body in
            let body = UncheckedBody(body: body)
            return try await withThrowingTaskGroup(of: Result?.self) { group in
                group.addTask {
                    try await self.client.withConnection { connection in
                        leased.value.store(true, ordering: .relaxed)
                        self.noteLeased(connection)
                        // Asked once the connection exists: a node swept meanwhile finds it ended by the sweeper.
                        try node?.checkAlive()
                        let transaction = PostgresTransaction(connection: connection, deadline: deadline, logger: logger)
                        let watch = ConnectionWatch(until: deadline) { connection.closeNow() }
                        defer { watch.end() }
                        do {
                            return try await body.body(transaction)
                        } catch {
                            if watch.expired || !Self.leavesConnectionHealthy(error, on: connection) {
                                await Self.closeBeforeRelease(connection)
                            }
                            throw error
                        }
                    }
                }
                group.addTask {
                    // nil: the lease came in time (or the body finished); otherwise the wait for a connection ends.
                    do {
                        try await Task.sleep(until: deadline, clock: .continuous)
                    } catch {
                        return nil
                    }
                    guard !leased.value.load(ordering: .relaxed) else { return nil }
                    throw DeadlineExceeded(what: "a PostgreSQL connection for \(what)")
                }
                while let next = try await group.next() {
                    if let value = next {
                        group.cancelAll()
                        return value
                    }
                }
                preconditionFailure("the lease task returns a value or throws")
            }
        }
    }

    /// Whether `connection` may serve the next lease after `error` ended a use of it: not after a deadline, a
    /// cancellation (a statement may still be under way), a lost connection, an unknown COMMIT outcome or a failure
    /// of the driver; after the server refused a statement (a transaction's is rolled back first,
    /// ``withTransaction(_:timeout:_:)``) or the caller's own error, it may.
    static func leavesConnectionHealthy(_ error: any Error, on connection: PostgresConnection) -> Bool {
        if connection.isClosed || ConnectionLoss.caused(error, on: connection) { return false }
        switch error {
        case is DeadlineExceeded, is CancellationError, is PostgresCommitOutcomeUnknown:
            return false
        case let error as PSQLError:
            return error.code == .server
        default:
            return true
        }
    }

    /// Whether `error` says the database could not be reached or answer (a lost connection, a deadline, no
    /// connection to lease), as opposed to the server refusing a statement or the node being fenced: what failed so
    /// is worth trying again once the database answers.
    static func lostTheDatabase(_ error: any Error) -> Bool {
        if error is NodeFenced || error is CancellationError { return false }
        guard let error = error as? PSQLError, error.code == .server else { return true }
        let state = error.serverInfo?[.sqlState] ?? ""
        return state.hasPrefix("57P") || state.hasPrefix("08")
    }

    /// Closes `connection` and waits (a second at most) until its channel closed: the pool forgets a connection when
    /// it sees it close, so once released it is not leased again.
    private static func closeBeforeRelease(_ connection: PostgresConnection) async {
        connection.closeNow()
        _ = await finishes(by: .now + .seconds(1)) {
            try? await connection.closeFuture.get()
        }
    }

    /// The body of a lease, crossing into the task group: it runs there only while the caller waits for it.
    private struct UncheckedBody<Result>: @unchecked Sendable {
        let body: (PostgresTransaction) async throws -> Result
    }

    /// Runs the pool until the node's services stop (it is given first, so it stops last).
    struct PoolService: Service {
        let pool: PostgresPool

        func run() async throws {
            self.pool.start()
            try? await gracefulShutdown()
            await self.pool.shutdown()
        }
    }
}

/// Whether a lease got its connection (its deadline then bounds the statements, not the wait).
private final class LeaseFlag: Sendable {
    let value = Atomic<Bool>(false)
}

/// A connection leased from a ``PostgresPool`` and the deadline of what runs on it.
struct PostgresTransaction: Sendable {
    /// The leased connection: use it only until the body returns.
    let connection: PostgresConnection
    /// When the transaction (or the lease) must end.
    let deadline: ContinuousClock.Instant
    let logger: Logger

    /// Runs `query` and reads its rows by ``deadline``, failing at once when the connection closed
    /// (``PostgresConnection/query(_:by:logger:_:)``).
    @discardableResult
    func query(_ query: PostgresQuery, _ what: String = "a PostgreSQL statement") async throws -> [PostgresRow] {
        try await self.connection.query(query, by: self.deadline, logger: self.logger, what)
    }
}

/// The connection failed while a `COMMIT` was unanswered: the transaction may or may not have committed.
struct PostgresCommitOutcomeUnknown: Error, CustomStringConvertible {
    var underlying: any Error
    var description: String { "the COMMIT's outcome is unknown: \(self.underlying)" }
}
