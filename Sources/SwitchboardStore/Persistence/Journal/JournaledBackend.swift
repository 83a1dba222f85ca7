import Dispatch
import Logging
import Synchronization

/// A ``MetadataBackend`` that makes each batch durable in an append-only journal (one `fdatasync` of a few
/// kilobytes) and writes it into the database behind, many batches per transaction.
///
/// Why: a commit to SQLite in WAL mode with `synchronous = FULL` writes every page the batch touched and syncs
/// them; on this machine class that takes milliseconds for fifty random rows, against a few hundred microseconds
/// to append and sync the same changes to a log. The store acknowledges a write once its batch is in the journal
/// (``apply(_:)`` returned), so acknowledged writes survive a crash either way.
///
/// - The checkpointer (its own serial queue) applies the journaled batches to the database in order, as many as
///   are waiting in one transaction, and empties the journal whenever the database holds all of it.
/// - ``loadAll()`` first replays what the journal holds into the database (entries are absolute values, so
///   replaying one the database already has is harmless), then loads the database.
/// - If the database refuses a checkpoint, the entries stay in the journal and the next ``apply(_:)`` retries it
///   first; while it still fails, ``apply(_:)`` throws, so the store refuses writes (`8001`) instead of letting
///   the journal grow without bound, and its probe (an empty batch) brings it back once the database recovers.
/// - ``close()`` waits for the checkpointer, empties the journal if the database has everything, and closes both.
public final class JournaledBackend: MetadataBackend {
    private struct Checkpoints {
        /// Journaled batches not yet in the database, oldest first.
        var pending: [[ChangeRecord]] = []
        /// A checkpoint is due after the interval.
        var scheduled = false
        /// A checkpoint was asked for at once because the journal grew past `checkpointBytes`.
        var urgent = false
        /// Why the last checkpoint failed; nil when it succeeded.
        var failure: String?
    }

    private let base: any MetadataBackend
    /// The journal; its lock is taken before the checkpoints' lock when both are needed.
    private let journal: Mutex<JournalFile>
    private let checkpoints = Mutex(Checkpoints())
    private let checkpointQueue = DispatchQueue(label: "switchboard.store.checkpoint")
    private let logger: Logger
    private let checkpointInterval: DispatchTimeInterval
    private let checkpointBytes: Int

    /// Journals the changes for `base` in the file at `journalPath` (created if needed).
    ///
    /// - Parameters:
    ///   - checkpointInterval: How long journaled batches may wait before they are written into the database
    ///     together (the longer, the fewer and larger the database transactions).
    ///   - checkpointBytes: A journal holding this many bytes of entries is written into the database at once.
    /// - Throws: ``JournalError`` when the journal cannot be opened.
    public init(
        base: any MetadataBackend, journalPath: String, checkpointInterval: DispatchTimeInterval = .milliseconds(200),
        checkpointBytes: Int = 16 << 20, logger: Logger = Logger(label: "switchboard.store")
    ) throws {
        self.base = base
        self.journal = Mutex(try JournalFile(path: journalPath))
        self.logger = logger
        self.checkpointInterval = checkpointInterval
        self.checkpointBytes = checkpointBytes
    }

    /// Replays the journal into the database, empties it, then loads the database.
    public func loadAll() throws -> [StoredSet] {
        try self.journal.withLock { journal in
            let payloads = try journal.readEntries()
            guard !payloads.isEmpty else { return }
            let batches = try payloads.map { payload throws(ChangeRecordCoding.Malformed) in
                try ChangeRecordCoding.decode(payload)
            }
            try self.base.apply(batches: batches)
            self.logger.info("replayed the journal into the database", metadata: ["batches": "\(batches.count)"])
            try journal.reset()
        }
        return try self.base.loadAll()
    }

    /// Appends the batch to the journal and syncs it; the database gets it behind. An empty batch probes the
    /// database itself.
    public func apply(_ batch: [ChangeRecord]) throws {
        if self.checkpoints.withLock({ $0.failure != nil }) {
            // The database refused the journal's entries: retry them before accepting more.
            self.checkpointQueue.sync { self.runCheckpoints() }
            if let failure = self.checkpoints.withLock({ $0.failure }) {
                throw JournalError(description: "the database refuses the journal's changes: \(failure)")
            }
        }
        guard !batch.isEmpty else {
            try self.base.apply([])
            return
        }
        var payload: [UInt8] = []
        ChangeRecordCoding.encode(batch, into: &payload)
        let schedule = try self.journal.withLock { journal in
            try journal.append(payload)
            let behind = journal.entryBytes >= self.checkpointBytes
            return self.checkpoints.withLock { state -> Schedule in
                state.pending.append(batch)
                if behind && !state.urgent {
                    state.urgent = true
                    return .now
                }
                if state.scheduled { return .none }
                state.scheduled = true
                return .later
            }
        }
        switch schedule {
        case .now: self.checkpointQueue.async { self.runCheckpoints() }
        case .later: self.checkpointQueue.asyncAfter(deadline: .now() + self.checkpointInterval) { self.runCheckpoints() }
        case .none: break
        }
    }

    private enum Schedule { case none, later, now }

    /// Waits for the checkpointer, empties the journal if the database has all of it, and closes both.
    public func close() throws {
        self.checkpointQueue.sync { self.runCheckpoints() }
        self.journal.withLock { journal in
            if let failure = self.checkpoints.withLock({ $0.failure }) {
                self.logger.error(
                    "closing with changes the database refused; they stay in the journal for the next start",
                    metadata: ["error": "\(failure)"])
            }
            journal.close()
        }
        try self.base.close()
    }

    /// Bytes of entries in the journal now (0 once the database holds everything).
    public var journalBytes: Int { self.journal.withLock { $0.entryBytes } }

    // MARK: - Checkpointer queue

    /// Applies the waiting batches in one transaction, then starts a new journal generation: the batches journaled
    /// meanwhile (a few milliseconds' worth) are applied first with appends held, so the journal never outgrows
    /// one checkpoint interval, however steady the load.
    private func runCheckpoints() {
        guard self.applyPending() else { return }
        self.journal.withLock { journal in
            guard self.applyPending() else { return }
            do {
                try journal.reset()
            } catch {
                self.logger.warning("could not empty the journal", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Applies every waiting batch in one transaction.
    /// - Returns: Whether the database took them (true when none was waiting).
    private func applyPending() -> Bool {
        let batches = self.checkpoints.withLock { state -> [[ChangeRecord]] in
            let batches = state.pending
            state.pending = []
            // Batches journaled from now on schedule the next checkpoint themselves.
            state.scheduled = false
            state.urgent = false
            return batches
        }
        if batches.isEmpty { return true }
        do {
            try self.base.apply(batches: batches)
        } catch {
            self.checkpoints.withLock { state in
                state.pending.insert(contentsOf: batches, at: 0)
                state.failure = "\(error)"
            }
            self.logger.error(
                "writing the journal into the database failed; writes are refused until it succeeds",
                metadata: ["error": "\(error)", "batches": "\(batches.count)"])
            return false
        }
        self.checkpoints.withLock { $0.failure = nil }
        return true
    }
}
