import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// How long a node waits for PostgreSQL or Redis before it gives up on a connection: every connect, query,
/// transaction and COMMIT has a deadline, and on expiry the connection is closed (which fails whatever else waits on
/// it) and opened again for the next use. A server that restarted, or a connection the server reset without the
/// driver noticing, then costs the waiting writes an error (`8001 storageFailure`), never the writer.
enum ClusterDeadlines {
    /// How long connecting to PostgreSQL or Redis may take.
    static let connect: Duration = .seconds(2)
    /// How long one transaction (all its statements and its COMMIT) may take.
    static let transaction: Duration = .seconds(5)
    /// How long one read of the change feed (a page, what its rows refer to) may take.
    static let feedRead: Duration = .seconds(5)
}

/// The connection closed before what was waited for was answered.
struct ConnectionClosed: Error, CustomStringConvertible {
    /// What was waited for.
    var what: String
    var description: String { "the connection closed before \(self.what) was answered" }
}

/// A wait on PostgreSQL or Redis passed its deadline; the connection was closed.
struct DeadlineExceeded: Error, CustomStringConvertible {
    /// What was waited for.
    var what: String
    var description: String { "\(self.what) did not finish in time; its connection was closed" }
}

/// Whether `body` finished by `deadline`; when it did not, it is left running (the caller then closes what it waits
/// on). For the last writes of a stopping node: a query on a connection the server reset may never answer, and a node
/// that cannot reach its database must still stop (the others sweep what it leaves once they see it dead).
func finishes(by deadline: ContinuousClock.Instant, _ body: @escaping @Sendable () async -> Void) async -> Bool {
    let decided = FirstOfTwo<Bool>()
    return await withCheckedContinuation { continuation in
        decided.set(continuation)
        Task {
            await body()
            decided.resume(true)
        }
        Task {
            try? await Task.sleep(until: deadline, clock: .continuous)
            decided.resume(false)
        }
    }
}

/// The result of `operation`, or ``DeadlineExceeded`` at `deadline` — whichever comes first. On expiry `onExpiry`
/// runs (it closes the connection `operation` waits on, so that the operation fails soon after), and the caller goes
/// on at once: a wait the driver never ends (a query on a connection the server reset) cannot hold it. Cancelling the
/// caller cancels `operation` and throws `CancellationError`.
///
/// With `closed` (a connection's `closeFuture`), the wait also ends, with ``ConnectionClosed``, as soon as it
/// completes: postgres-nio never answers a statement written to a closed channel.
func withDeadline<T: Sendable>(
    _ deadline: ContinuousClock.Instant, _ what: @autoclosure () -> String,
    onExpiry: @escaping @Sendable () -> Void, failingWhen closed: EventLoopFuture<Void>? = nil,
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    let decided = FirstOfTwo<Result<T, any Error>>()
    let what = what()
    closed?.whenComplete { _ in decided.resume(.failure(ConnectionClosed(what: what))) }
    let worker = Task {
        do {
            decided.resume(.success(try await operation()))
        } catch {
            decided.resume(.failure(error))
        }
    }
    let timer = Task {
        do {
            try await Task.sleep(until: deadline, clock: .continuous)
        } catch {
            return  // the operation finished first
        }
        if decided.resume(.failure(DeadlineExceeded(what: what))) { onExpiry() }
    }
    defer { timer.cancel() }
    return try await withTaskCancellationHandler {
        try await withCheckedContinuation { continuation in
            decided.set(continuation)
        }.get()
    } onCancel: {
        worker.cancel()
        decided.resume(.failure(CancellationError()))
    }
}

/// A continuation resumed by whichever of several racers comes first; a value that comes before the continuation is
/// kept for it.
private final class FirstOfTwo<Value: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Value, Never>?
        var early: Value?
        var done = false
    }

    private let state = Mutex(State())

    func set(_ continuation: CheckedContinuation<Value, Never>) {
        let early = self.state.withLock { state -> Value? in
            if let early = state.early {
                state.early = nil
                return early
            }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(returning: early) }
    }

    /// Resumes the waiter with `value` unless another racer came first; whether this one won.
    @discardableResult
    func resume(_ value: Value) -> Bool {
        let (won, continuation) = self.state.withLock { state -> (Bool, CheckedContinuation<Value, Never>?) in
            guard !state.done else { return (false, nil) }
            state.done = true
            guard let continuation = state.continuation else {
                state.early = value
                return (true, nil)
            }
            state.continuation = nil
            return (true, continuation)
        }
        continuation?.resume(returning: value)
        return won
    }
}

extension PostgresConnection {
    /// Runs `query` and reads all its rows by `deadline`; on expiry the connection is closed (so it is opened again
    /// for the next use) and ``DeadlineExceeded`` thrown. When the connection closes first (or had closed), the wait
    /// ends at once with ``ConnectionClosed``.
    @discardableResult
    func query(
        _ query: PostgresQuery, by deadline: ContinuousClock.Instant, logger: Logger, _ what: String = "a PostgreSQL query"
    ) async throws -> [PostgresRow] {
        if self.isClosed { throw ConnectionClosed(what: what) }
        return try await withDeadline(deadline, what, onExpiry: { self.closeNow() }, failingWhen: self.closeFuture) {
            try await self.query(query, logger: logger).collect()
        }
    }

    /// Ends the open transaction after `error`, never waiting more than a second.
    ///
    /// A connection that is closed, or was lost (``ConnectionLoss``), is not asked: the server rolls back what a
    /// session that ended had begun, and postgres-nio never answers a statement written to a closed channel (it
    /// would wait forever, as CI saw a profile writer do after `pg_terminate_backend`). A ROLLBACK that takes longer
    /// than the second closes the connection, which ends the transaction just the same.
    ///
    /// - Returns: Whether the connection is still usable (the ROLLBACK was answered).
    @discardableResult
    func rollBack(after error: any Error, logger: Logger) async -> Bool {
        guard !ConnectionLoss.caused(error, on: self) else {
            self.closeNow()
            return false
        }
        do {
            try await self.query("ROLLBACK", by: .now + .seconds(1), logger: logger, "a ROLLBACK")
            return true
        } catch {
            self.closeNow()
            return false
        }
    }

    /// Closes the connection without waiting (what waits on it fails). The connection is kept until its channel has
    /// closed: the caller may drop the last other reference at once, and postgres-nio traps (in debug builds) when a
    /// connection is deinitialized before it is closed.
    func closeNow() {
        (self.close() as EventLoopFuture<Void>).whenComplete { _ in withExtendedLifetime(self) {} }
    }
}

/// Closes a connection at a deadline unless ended first: the bound of a transaction whose statements run inline.
/// Closing fails every query waiting on the connection, so the transaction ends with an error.
final class ConnectionWatch: Sendable {
    private let timer: Task<Void, Never>
    private let flag = ExpiryFlag()

    /// Watches `close` until `deadline`.
    init(until deadline: ContinuousClock.Instant, close: @escaping @Sendable () -> Void) {
        let flag = self.flag
        self.timer = Task {
            do {
                try await Task.sleep(until: deadline, clock: .continuous)
            } catch {
                return
            }
            flag.value.store(true, ordering: .relaxed)
            close()
        }
    }

    /// Watches `connection` for ``ClusterDeadlines/transaction`` from now.
    convenience init(_ connection: PostgresConnection, for duration: Duration = ClusterDeadlines.transaction) {
        self.init(until: .now + duration) { connection.closeNow() }
    }

    /// Whether the deadline passed (and the connection was closed).
    var expired: Bool { self.flag.value.load(ordering: .relaxed) }

    /// Stops watching.
    func end() {
        self.timer.cancel()
    }
}

/// Whether a ``ConnectionWatch``'s deadline passed.
private final class ExpiryFlag: Sendable {
    let value = Atomic<Bool>(false)
}
