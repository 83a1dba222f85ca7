import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import SwitchboardServer
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// Reads the cluster's change feed (`sb_outbox`) from this node's cursor and hands each row another node committed to
/// the consumer of its kind (``ChangeFeedConsumer``): metadata changes go into this node's copy of the sets and out
/// to this node's subscribers, and so on for every shared area.
///
/// The feed is read on a connection of its own, which also `LISTEN`s: a notification wakes the reader at once, and
/// without one it reads every ``pollInterval`` anyway, so a lost notification delays a change, never loses it.
/// When the connection fails the reader connects again and goes on from its cursor, with no gap.
final class ChangeFeed: Service, Sendable {
    /// How often the feed is read when no notification comes.
    let pollInterval: Duration
    private let location: PostgresLocation
    private let nodeID: String
    private let consumers: [ChangeFeedRows.Kind: any ChangeFeedConsumer]
    private let logger: Logger
    private let cursor: Atomic<Int64>
    private let progress: FeedProgress?
    private let wakeup = Wakeup()
    private let connectionIDs = Atomic<Int>(1_000)

    /// - Parameters:
    ///   - startingAfter: The last row the node's loaded state already holds.
    ///   - consumers: What to do with each kind of row other nodes write; rows of other kinds are skipped.
    init(
        location: PostgresLocation, nodeID: String, startingAfter cursor: Int64,
        pollInterval: Duration = .milliseconds(100), logger: Logger,
        consumers: [ChangeFeedRows.Kind: any ChangeFeedConsumer], progress: FeedProgress? = nil
    ) {
        self.progress = progress
        progress?.advance(to: cursor)
        self.location = location
        self.nodeID = nodeID
        self.cursor = Atomic(cursor)
        self.pollInterval = pollInterval
        self.logger = logger
        self.consumers = consumers
    }

    /// The id of the last row read.
    var position: Int64 { self.cursor.load(ordering: .relaxed) }

    /// Reads the feed until graceful shutdown or cancellation, connecting again after failures.
    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            var backoff = Duration.milliseconds(50)
            while !Task.isCancelled {
                do {
                    try await self.readWhileConnected()
                    backoff = .milliseconds(50)
                } catch is CancellationError {
                    return
                } catch {
                    if Task.isCancelled { return }
                    self.logger.warning(
                        "change feed connection lost; connecting again", metadata: ["error": "\(String(reflecting: error))"])
                    try await Task.sleep(for: backoff)
                    backoff = min(backoff * 2, .seconds(2))
                    continue
                }
            }
        }
    }

    private func readWhileConnected() async throws {
        var configuration = self.location.configuration
        configuration.options.additionalStartupParameters = [("application_name", "switchboard-feed-\(self.nodeID)")]
        let connection = try await PostgresConnection.connect(
            configuration: configuration, id: self.connectionIDs.add(1, ordering: .relaxed).newValue, logger: self.logger)
        defer { Task { _ = try? await connection.close() } }
        // Closing the connection ends every wait on it (the notifications, a query), so a cancelled reader stops
        // at once whatever it was waiting for.
        try await withTaskCancellationHandler {
            try await connection.listen(on: PostgresSchema.notifyChannel) { notifications in
                try await self.read(on: connection, wokenBy: notifications)
            }
        } onCancel: {
            _ = connection.close() as EventLoopFuture<Void>
        }
    }

    private func read(on connection: PostgresConnection, wokenBy notifications: PostgresNotificationSequence) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [wakeup] in
                for try await _ in notifications { wakeup.signal() }
                throw FeedConnectionClosed()
            }
            group.addTask {
                var lastPrune = ContinuousClock.now
                while !Task.isCancelled {
                    // Catch up first (this also covers whatever was committed while the connection was down).
                    while try await self.readPage(on: connection) {}
                    if ContinuousClock.now - lastPrune > .seconds(60) {
                        try await ChangeFeedRows.prune(olderThanSeconds: 600, on: connection, logger: self.logger)
                        lastPrune = ContinuousClock.now
                    }
                    await self.wakeup.wait(timeout: self.pollInterval)
                }
            }
            try await group.next()
            group.cancelAll()
        }
    }

    /// Reads and applies one page of rows; true when the page was full (more may follow at once).
    private func readPage(on connection: PostgresConnection) async throws -> Bool {
        let limit = 1_000
        let entries = try await ChangeFeedRows.read(after: self.position, limit: limit, on: connection, logger: self.logger)
        for entry in entries {
            if entry.node != self.nodeID, let kind = ChangeFeedRows.Kind(rawValue: entry.kind),
                let consumer = self.consumers[kind]
            {
                do {
                    try await consumer.consume(entry.payload, on: connection, logger: self.logger)
                } catch let error as PSQLError {
                    throw error  // read the row again on a new connection
                } catch {
                    self.logger.error(
                        "unreadable change feed row skipped", metadata: ["row": "\(entry.id)", "error": "\(error)"])
                }
            }
            self.cursor.store(entry.id, ordering: .relaxed)
            self.progress?.advance(to: entry.id)
        }
        return entries.count == limit
    }
}

/// What a node does with one kind of change feed row that another node committed.
protocol ChangeFeedConsumer: Sendable {
    /// Applies one row's payload, in feed order.
    ///
    /// - Parameter connection: The feed's own connection, to read what the row refers to (not in a transaction).
    /// - Throws: A `PSQLError` makes the reader connect again and read the row again; any other error skips the row
    ///   (logged).
    func consume(_ payload: ByteBuffer, on connection: PostgresConnection, logger: Logger) async throws
}

/// Metadata rows: brings this node's copy of the set up to date (reading the set again after a gap), then publishes
/// the storage event to this node's subscribers.
struct MetadataFeedConsumer: ChangeFeedConsumer {
    let store: MetadataStore
    let publisher: PushPublisher

    func consume(_ payload: ByteBuffer, on connection: PostgresConnection, logger: Logger) async throws {
        let change = try MetadataChangeCoding.decode(payload)
        if !self.store.applyCommitted(change) {
            // Changes before this one are missing here: take the set as committed now.
            let sets = try await PostgresMetadataBackend.readSets([change.outcome.scope], on: connection, logger: logger)
            self.store.install(sets)
        }
        self.publisher.publish(.storageEvent(change.storageEvent), to: .metadataSubscribers(of: change.outcome.scope))
    }
}

/// The change feed's notifications ended: its connection is gone.
struct FeedConnectionClosed: Error {}

/// Wakes one waiter: a signal before the wait is kept, so a wake-up between two waits is not lost.
final class Wakeup: Sendable {
    private struct State {
        var signalled = false
        var waiter: CheckedContinuation<Void, Never>?
        var generation = 0
    }

    private let state = Mutex(State())

    func signal() {
        let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.signalled = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns after a signal, or after `timeout`.
    func wait(timeout: Duration) async {
        let generation = self.state.withLock { state -> Int? in
            if state.signalled {
                state.signalled = false
                return nil
            }
            state.generation += 1
            return state.generation
        }
        guard let generation else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = self.state.withLock { state -> Bool in
                if state.signalled {
                    state.signalled = false
                    return true
                }
                state.waiter = continuation
                return false
            }
            if resumeNow {
                continuation.resume()
                return
            }
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                guard let self else { return }
                let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
                    guard state.generation == generation, let waiter = state.waiter else { return nil }
                    state.waiter = nil
                    return waiter
                }
                waiter?.resume()
            }
        }
    }
}
