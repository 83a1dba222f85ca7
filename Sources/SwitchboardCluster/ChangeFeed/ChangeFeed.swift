import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import SwitchboardRedis
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// Reads the cluster's change feed (`sb_outbox`) from this node's cursor and hands each row another node committed to
/// the consumer of its kind (``ChangeFeedConsumer``): metadata changes go into this node's copy of the sets and out
/// to this node's subscribers, and so on for every shared area.
///
/// The feed is read on a connection of its own, which also `LISTEN`s: a notification wakes the reader at once, and
/// without one it reads every ``pollInterval`` anyway, so a lost notification delays a change, never loses it.
/// When the connection fails the reader connects again and goes on from its cursor, with no gap. Every wait on the
/// connection is bounded (connecting by ``ClusterDeadlines/connect``, each read by ``ClusterDeadlines/feedRead``):
/// a read that does not finish in time closes the connection, and the reader connects again.
///
/// From the moment the connection is lost until the reader has read the feed to its end on a new one, the node knows
/// it may be behind the cluster: ``onBehind`` is told (the node then answers reads of shared metadata with
/// `8001 storageFailure` rather than serve what may be stale), and told again once it caught up.
final class ChangeFeed: Service, Sendable {
    /// How often the feed is read when no notification comes.
    let pollInterval: Duration
    private let location: PostgresLocation
    private let nodeID: String
    private let consumers: [ChangeFeedRows.Kind: any ChangeFeedConsumer]
    /// Where rows are relayed through Redis (nil: `NOTIFY` wakes the reader).
    private let relay: RedisLocation?
    /// Relayed rows not applied yet.
    private let relayed = RelayedRows()
    private let logger: Logger
    private let cursor: Atomic<Int64>
    private let progress: FeedProgress?
    private let wakeup = Wakeup()
    private let connectionIDs = Atomic<Int>(1_000)
    /// Told true when the reader lost its connection (it may be behind), false once it read the feed to its end again.
    private let onBehind: @Sendable (Bool) -> Void
    private let state: ClusterState?
    /// Whether the reader lost its connection and has not caught up since.
    private let behind = Atomic<Bool>(false)

    /// - Parameters:
    ///   - startingAfter: The last row the node's loaded state already holds.
    ///   - consumers: What to do with each kind of row other nodes write; rows of other kinds are skipped.
    ///   - relay: The Redis server writers relay their rows through (``RedisFeedRelay``); nil: `NOTIFY` wakes the
    ///     reader.
    init(
        location: PostgresLocation, nodeID: String, startingAfter cursor: Int64,
        pollInterval: Duration = .milliseconds(100), relay: RedisLocation? = nil, logger: Logger,
        consumers: [ChangeFeedRows.Kind: any ChangeFeedConsumer], progress: FeedProgress? = nil,
        state: ClusterState? = nil, onBehind: @escaping @Sendable (Bool) -> Void = { _ in }
    ) {
        self.relay = relay
        self.state = state
        self.onBehind = onBehind
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

    /// Reads the feed (and, with a relay, listens to it) until graceful shutdown or cancellation, connecting again
    /// after failures.
    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            try await withThrowingTaskGroup(of: Void.self) { group in
                if let relay = self.relay { group.addTask { await self.listen(to: relay) } }
                group.addTask { try await self.readFeed() }
                try await group.next()
                group.cancelAll()
            }
        }
    }

    /// Keeps a subscription to the relay's channel, connecting again after failures; relayed rows wake the reader.
    private func listen(to relay: RedisLocation) async {
        var backoff = ReconnectPolicy.connection.backoff()
        while !Task.isCancelled {
            do {
                let connection = try await RedisConnection.connect(host: relay.host, port: relay.port) {
                    [relayed, wakeup, logger] message in
                    guard let entries = RedisFeedRelay.decode(message.payload) else {
                        logger.error("malformed change feed relay message skipped")
                        return
                    }
                    relayed.rows.withLock { $0.append(contentsOf: entries) }
                    wakeup.signal()
                }
                try await withTaskCancellationHandler {
                    try await connection.subscribe([RedisFeedRelay.channel])
                    backoff.succeeded()
                    // Rows committed while no subscription was up are read from PostgreSQL by the poll.
                    try await connection.closeFuture.get()
                } onCancel: {
                    Task { await connection.close() }
                }
            } catch {
                if Task.isCancelled { return }
                self.logger.warning("change feed relay subscription lost", metadata: ["error": "\(error)"])
            }
            try? await backoff.wait()
        }
    }

    private func readFeed() async throws {
        var backoff = ReconnectPolicy.connection.backoff()
        while !Task.isCancelled {
            do {
                try await self.readWhileConnected()
                backoff.succeeded()
            } catch is CancellationError {
                return
            } catch {
                if Task.isCancelled { return }
                if !self.behind.exchange(true, ordering: .relaxed) { self.onBehind(true) }
                self.logger.warning(
                    "change feed connection lost; connecting again", metadata: ["error": "\(String(reflecting: error))"])
                try await backoff.wait()
            }
        }
    }

    private func readWhileConnected() async throws {
        var configuration = self.location.configuration(applicationName: "switchboard-feed-\(self.nodeID)")
        configuration.options.connectTimeout = .seconds(2)  // ClusterDeadlines.connect
        let connection = try await PostgresConnection.connect(
            configuration: configuration, id: self.connectionIDs.add(1, ordering: .relaxed).newValue, logger: self.logger)
        if self.behind.load(ordering: .relaxed) { self.state?.feedReconnects.add(1, ordering: .relaxed) }
        defer { Task { _ = try? await connection.close() } }
        // Closing the connection ends every wait on it (the notifications, a query), so a cancelled reader stops
        // at once whatever it was waiting for, and a read past its deadline (ConnectionWatch) ends in an error.
        let listening = ConnectionWatch(connection, for: ClusterDeadlines.feedRead)
        try await withTaskCancellationHandler {
            try await connection.listen(on: PostgresSchema.notifyChannel) { notifications in
                listening.end()
                try await self.read(on: connection, wokenBy: notifications)
            }
        } onCancel: {
            _ = connection.close() as EventLoopFuture<Void>
        }
    }

    private func read(on connection: PostgresConnection, wokenBy notifications: PostgresNotificationSequence) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [wakeup] in
                for try await _ in notifications {
                    self.relayed.notified.store(true, ordering: .relaxed)
                    wakeup.signal()
                }
                throw FeedConnectionClosed()
            }
            group.addTask {
                var lastPrune = ContinuousClock.now
                var lastRead: ContinuousClock.Instant?
                while !Task.isCancelled {
                    // Relayed rows first; PostgreSQL when they leave a gap, without a relay, and every poll interval
                    // (this also catches up whatever was committed while a connection was down).
                    let gap = try await self.watched(connection) { try await self.applyRelayed(on: connection) }
                    let notified = self.relayed.notified.exchange(false, ordering: .relaxed)
                    if gap || notified || self.relay == nil || self.behind.load(ordering: .relaxed)
                        || lastRead.map({ ContinuousClock.now - $0 >= self.pollInterval }) ?? true
                    {
                        while try await self.watched(connection, { try await self.readPage(on: connection) }) {}
                        lastRead = ContinuousClock.now
                        if self.behind.exchange(false, ordering: .relaxed) {
                            self.logger.notice("change feed caught up", metadata: ["cursor": "\(self.position)"])
                            self.onBehind(false)
                        }
                    }
                    if ContinuousClock.now - lastPrune > .seconds(60) {
                        try await self.watched(connection) {
                            try await ChangeFeedRows.prune(olderThanSeconds: 600, on: connection, logger: self.logger)
                        }
                        lastPrune = ContinuousClock.now
                    }
                    await self.wakeup.wait(timeout: self.pollInterval)
                }
            }
            try await group.next()
            group.cancelAll()
        }
    }

    /// Runs one read on `connection`, closing the connection if it takes longer than ``ClusterDeadlines/feedRead``
    /// (the read then fails, and the reader connects again).
    private func watched<T>(_ connection: PostgresConnection, _ read: () async throws -> T) async throws -> T {
        let watch = ConnectionWatch(connection, for: ClusterDeadlines.feedRead)
        defer { watch.end() }
        do {
            return try await read()
        } catch where watch.expired {
            throw DeadlineExceeded(what: "a change feed read")
        }
    }

    /// Applies the relayed rows that follow the cursor without a gap; true when one does not (PostgreSQL must be
    /// read: the rows between were lost on the way, or are still on theirs).
    private func applyRelayed(on connection: PostgresConnection) async throws -> Bool {
        let entries = self.relayed.rows.withLock { relayed -> [ChangeFeedRows.Entry] in
            defer { relayed = [] }
            return relayed
        }
        for entry in entries.sorted(by: { $0.id < $1.id }) where entry.id > self.position {
            guard entry.id == self.position + 1 else { return true }
            try await self.apply(entry, on: connection)
        }
        return false
    }

    /// Reads and applies one page of rows; true when the page was full (more may follow at once).
    private func readPage(on connection: PostgresConnection) async throws -> Bool {
        let limit = 1_000
        let (cursor, logger) = (self.position, self.logger)
        let entries = try await withDeadline(
            .now + ClusterDeadlines.feedRead, "a change feed read", onExpiry: { connection.closeNow() }
        ) {
            try await ChangeFeedRows.read(after: cursor, limit: limit, on: connection, logger: logger)
        }
        for entry in entries { try await self.apply(entry, on: connection) }
        return entries.count == limit
    }

    /// Hands a row another node wrote to its kind's consumer, and moves the cursor past it.
    private func apply(_ entry: ChangeFeedRows.Entry, on connection: PostgresConnection) async throws {
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

/// Metadata rows: brings this node's copy of the set up to date (reading the set again after a gap), then hands the
/// change to the store's handler (the storage event to this node's subscribers).
struct MetadataFeedConsumer: ChangeFeedConsumer {
    let store: MetadataStore

    func consume(_ payload: ByteBuffer, on connection: PostgresConnection, logger: Logger) async throws {
        let change = try MetadataChangeCoding.decode(payload)
        if !self.store.applyCommitted(change) {
            // Changes before this one are missing here: take the set as committed now.
            let sets = try await PostgresMetadataBackend.readSets(
                [change.outcome.scope], on: connection, by: .now + ClusterDeadlines.feedRead, logger: logger)
            self.store.install(sets)
        }
        self.store.deliverCommittedElsewhere(change)
    }
}

/// Rows relayed through Redis, waiting for the reader, and whether a `NOTIFY` came (from a writer that does not
/// relay) since the reader last looked.
final class RelayedRows: Sendable {
    let rows = Mutex<[ChangeFeedRows.Entry]>([])
    let notified = Atomic<Bool>(false)
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

    /// Returns after a signal, after `timeout`, or when the task is cancelled.
    func wait(timeout: Duration) async {
        await withTaskCancellationHandler {
            await self.waitForSignal(timeout: timeout)
        } onCancel: {
            self.signal()
        }
    }

    private func waitForSignal(timeout: Duration) async {
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
