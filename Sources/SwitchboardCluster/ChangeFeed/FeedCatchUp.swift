import Logging
import PostgresNIO
import Synchronization

/// Waits until this node's feed reader has applied every change committed before a call: reads where the feed ends
/// (`max(id)` of `sb_outbox`, on a connection of the node's ``PostgresPool``) and waits for the reader to get there (``FeedProgress``).
///
/// A change committed before the call has a row at or below the end read after the call, because rows commit in id
/// order (``ChangeFeedRows/append(_:node:notify:on:logger:)``). Calls that come while a read is on its way wait for
/// the next one (the one on its way may have started before their change committed), so however many calls come
/// at once, at most one read runs and one waits.
final class FeedCatchUp: Sendable {
    private struct State {
        /// Waiting for the next read.
        var waiting: [@Sendable () -> Void] = []
        var reading = false
    }

    private let progress: FeedProgress
    private let pool: PostgresPool
    private let logger: Logger
    private let state = Mutex(State())

    init(pool: PostgresPool, progress: FeedProgress, logger: Logger) {
        self.progress = progress
        self.logger = logger
        self.pool = pool
    }

    /// Runs `then` once the feed reader applied every row committed before this call (at once, on the task that
    /// read the feed's end, when it cannot be read: the caller then goes on with what the node holds).
    func whenCaughtUp(_ then: @escaping @Sendable () -> Void) {
        let start = self.state.withLock { state -> Bool in
            state.waiting.append(then)
            guard !state.reading else { return false }
            state.reading = true
            return true
        }
        if start { Task { await self.read() } }
    }

    private func read() async {
        while true {
            let waiting = self.state.withLock { state -> [@Sendable () -> Void] in
                defer { state.waiting = [] }
                if state.waiting.isEmpty { state.reading = false }
                return state.waiting
            }
            guard !waiting.isEmpty else { return }
            let end = Mutex<Result<Int64, any Error>?>(nil)
            let answered = await finishes(by: .now + Self.timeout) {
                let result: Result<Int64, any Error>
                do {
                    result = .success(try await self.readEnd())
                } catch {
                    result = .failure(error)
                }
                end.withLock { $0 = result }
            }
            switch answered ? end.withLock({ $0 }) : nil {
            case .success(let position):
                for then in waiting { self.progress.whenReached(position, then) }
            case .failure(let error):
                self.logger.warning(
                    "the change feed's end could not be read; answering from this node's copy",
                    metadata: ["error": "\(String(reflecting: error))"])
                for then in waiting { then() }
            case nil:
                self.logger.warning("the change feed's end was not read in time; answering from this node's copy")
                for then in waiting { then() }
            }
        }
    }

    /// How long reading the feed's end may take.
    private static let timeout = Duration.seconds(2)

    private func readEnd() async throws -> Int64 {
        try await self.pool.withConnection("reading the change feed's end", timeout: Self.timeout) { lease in
            try await ChangeFeedRows.head(on: lease.connection, logger: lease.logger)
        }
    }
}
