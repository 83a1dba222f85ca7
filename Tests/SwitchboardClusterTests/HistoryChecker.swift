/// What a metadata set held: its `majorRevision` and each item's value and revision.
struct MetadataState: Sendable, Hashable, CustomStringConvertible {
    /// One item's value and revision.
    struct Item: Sendable, Hashable {
        var value: String
        var revision: Int64
    }

    var majorRevision: UInt64
    var items: [String: Item]

    init(majorRevision: UInt64 = 0, items: [String: Item] = [:]) {
        self.majorRevision = majorRevision
        self.items = items
    }

    var description: String {
        let items = self.items.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value.value)@\($0.value.revision)" }
        return "r\(self.majorRevision) {\(items.joined(separator: ", "))}"
    }
}

/// One operation of a client on one channel's metadata set, as the client saw it: what it asked, through which
/// node, when it asked and was answered (seconds since the run started, one clock for every client) and what it got.
struct HistoryOperation: Sendable, Hashable {
    /// What the client asked.
    enum Action: Sendable, Hashable {
        /// `getChannelMetadata`.
        case read
        /// `setChannelMetadata` of one item, no check.
        case set(key: String, value: String)
        /// `setChannelMetadata` of one item with the set's `majorRevision` check.
        case compareMajor(expected: UInt64, key: String, value: String)
        /// `updateChannelMetadata` of one item with the item's `revision` check.
        case compareItem(key: String, expected: Int64, value: String)

        /// The value written (unique to the write), nil for a read.
        var value: String? {
            switch self {
            case .read: nil
            case .set(_, let value), .compareMajor(_, _, let value), .compareItem(_, _, let value): value
            }
        }

        /// The key written, nil for a read.
        var key: String? {
            switch self {
            case .read: nil
            case .set(let key, _), .compareMajor(_, let key, _), .compareItem(let key, _, _): key
            }
        }
    }

    /// What the client got.
    enum Outcome: Sendable, Hashable {
        /// A read's answer.
        case read(MetadataState)
        /// A write's acknowledgement: the set's new `majorRevision`.
        case written(revision: UInt64)
        /// The server answered with an error (every operation is atomic: it changed nothing), or the request was
        /// never sent; `currentRevision` is the error body's (-1 when none).
        case refused(code: UInt32, currentRevision: Int64)
        /// No answer (timed out, connection lost): the write may or may not have taken effect.
        case unknown(code: UInt32)
    }

    var client: Int
    var node: Int
    var channel: String
    var action: Action
    var invokedAt: Double
    var respondedAt: Double
    var outcome: Outcome
    /// A read made right after the client connected to a node, while it waits for the node to show what the
    /// client saw before: not held to the client's floor (its revision still counts for the bounded staleness).
    var catchUp = false

    var isAcknowledgedWrite: Bool {
        if case .written = self.outcome { return self.action != .read }
        return false
    }
}

/// A write PostgreSQL committed, as its change feed (`sb_outbox`) holds it: one row per write, in commit order.
struct CommittedWrite: Sendable, Hashable {
    var feedID: Int64
    var channel: String
    /// The set's `majorRevision` after the write.
    var revision: UInt64
    /// The items written, with their new revision.
    var items: [String: MetadataState.Item]
}

/// A condition a history broke.
struct HistoryViolation: Sendable, Hashable, CustomStringConvertible {
    enum Kind: String, Sendable, Hashable {
        /// A read showed a `majorRevision` PostgreSQL never committed for the set (a dirty read).
        case uncommittedRevision
        /// A read showed a committed revision with items other than PostgreSQL committed at it (the revision was
        /// given to a different write, or a value from elsewhere was mixed in).
        case foreignState
        /// A read showed a value whose write was refused (e.g. `8001`, "changed nothing").
        case refusedValueRead
        /// A read showed a revision below the reader's own last acknowledged write or an earlier read of the
        /// same client (read-your-writes, monotonic reads).
        case staleRead
        /// A read invoked more than `staleAfter` seconds after a write of the set was acknowledged showed a
        /// revision below that write's.
        case lateRead
        /// An acknowledged write is not in PostgreSQL's feed.
        case lostWrite
        /// An acknowledged write was committed with another revision than the client was told.
        case wrongRevision
        /// A write that was answered with an error was committed.
        case refusedWriteCommitted
        /// PostgreSQL committed two writes of one set with one revision.
        case duplicateRevision
        /// Two compare-and-set writes with one expected revision were both acknowledged.
        case duplicateWinner
        /// An acknowledged compare-and-set write was committed over another revision than it expected.
        case compareMismatch
        /// A compare-and-set write was refused although its expected revision was the committed one for the
        /// whole time the request was in flight.
        case falseConflict
        /// A write committed before another write was even invoked has the higher revision.
        case realTimeOrder
        /// The feed's revisions of a set do not count up one by one.
        case revisionGap
        /// At the end, a node's copy of a set, PostgreSQL's rows and the feed do not agree.
        case finalStateDiffers
    }

    var kind: Kind
    var detail: String

    var description: String { "\(self.kind.rawValue): \(self.detail)" }
}

/// Checks a history of reads, writes and compare-and-set writes, made by many clients through several nodes, against
/// what PostgreSQL committed.
///
/// Writes carry values unique to them, so every value a read returns names the write it came from. The conditions:
/// - every value and revision a read returns was committed, together, by PostgreSQL (no dirty read, no revision
///   given to a different write, no value of a refused write);
/// - acknowledged writes are in the feed with the revision the client was told; refused writes are not; PostgreSQL
///   gave each revision of a set to one write, counting up by one;
/// - compare-and-set: one winner per expected revision, each winner committed right over the revision it expected,
///   and no refusal while the expected revision was current throughout;
/// - writes are linearizable: a write acknowledged before another was invoked has the lower revision;
/// - a client never reads a revision below its own last acknowledged write or its own earlier reads (except while
///   it catches up after connecting to a node, see ``HistoryOperation/catchUp``);
/// - bounded staleness: a read invoked more than ``staleAfter`` seconds after a write was acknowledged shows it;
/// - at the end, every node's copy equals PostgreSQL's rows, which equal the feed replayed (``checkFinal``).
///
/// Reads through different nodes are not required to be linearizable: a node applies the others' writes from the
/// feed a few milliseconds later (Docs/cluster.md).
struct HistoryChecker: Sendable {
    var operations: [HistoryOperation]
    var committed: [CommittedWrite]
    /// How long after its acknowledgement every read must show a write.
    var staleAfter: Double

    init(operations: [HistoryOperation], committed: [CommittedWrite], staleAfter: Double = 5) {
        self.operations = operations
        self.committed = committed.sorted { $0.feedID < $1.feedID }
        self.staleAfter = staleAfter
    }

    /// Every violation of the history, in the order of the checks.
    func check() -> [HistoryViolation] {
        let replay = Replay(self.committed)
        var violations = replay.violations
        violations += self.checkWrites(replay)
        violations += self.checkCompareAndSet(replay)
        violations += self.checkRealTimeOrder(replay)
        violations += self.checkReads(replay)
        violations += self.checkClientFloors()
        violations += self.checkStaleness()
        return violations
    }

    /// The final state: each node's copy (`nodes`: node index -> channel -> state) and PostgreSQL's rows
    /// (`database`) must equal the feed replayed, for every channel the history touched.
    func checkFinal(database: [String: MetadataState], nodes: [Int: [String: MetadataState]]) -> [HistoryViolation] {
        let replay = Replay(self.committed)
        let channels = Set(self.operations.map(\.channel)).union(self.committed.map(\.channel)).sorted()
        var violations: [HistoryViolation] = []
        for channel in channels {
            let expected = replay.latest[channel] ?? MetadataState()
            let stored = database[channel] ?? MetadataState()
            if stored != expected {
                violations.append(
                    HistoryViolation(
                        kind: .finalStateDiffers,
                        detail: "\(channel): PostgreSQL's rows hold \(stored), the feed replayed \(expected)"))
            }
            for (node, copies) in nodes.sorted(by: { $0.key < $1.key }) {
                let copy = copies[channel] ?? MetadataState()
                if copy != stored {
                    violations.append(
                        HistoryViolation(
                            kind: .finalStateDiffers,
                            detail: "\(channel): node \(node) serves \(copy), PostgreSQL's rows hold \(stored)"))
                }
            }
        }
        return violations
    }

    // MARK: The feed

    /// The feed replayed: each set's state at each committed revision, and where each value was committed.
    struct Replay {
        var states: [String: [UInt64: MetadataState]] = [:]
        var latest: [String: MetadataState] = [:]
        /// value -> the write that committed it (values are unique to a write).
        var writes: [String: CommittedWrite] = [:]
        /// channel -> revision -> the committed write.
        var byRevision: [String: [UInt64: CommittedWrite]] = [:]
        var violations: [HistoryViolation] = []

        init(_ committed: [CommittedWrite]) {
            for write in committed {
                var state = self.latest[write.channel] ?? MetadataState()
                if self.byRevision[write.channel]?[write.revision] != nil {
                    self.violations.append(
                        HistoryViolation(
                            kind: .duplicateRevision,
                            detail: "\(write.channel) r\(write.revision) was committed twice (feed rows "
                                + "\(self.byRevision[write.channel]![write.revision]!.feedID) and \(write.feedID))"))
                } else if write.revision != state.majorRevision + 1 {
                    self.violations.append(
                        HistoryViolation(
                            kind: .revisionGap,
                            detail: "\(write.channel): feed row \(write.feedID) commits r\(write.revision) after r\(state.majorRevision)"))
                }
                state.majorRevision = max(state.majorRevision, write.revision)
                state.items.merge(write.items) { $1 }
                self.latest[write.channel] = state
                self.states[write.channel, default: [:]][write.revision] = state
                self.byRevision[write.channel, default: [:]][write.revision] = write
                for item in write.items.values { self.writes[item.value] = write }
            }
        }

        /// The committed write that set `key` to the item revision `revision` in `channel`, if any.
        func write(of channel: String, key: String, revision: Int64) -> CommittedWrite? {
            guard revision > 0, let write = self.byRevision[channel]?[UInt64(revision)], write.items[key] != nil else {
                return nil
            }
            return write
        }

        /// The first committed write of `channel` after `revision` that wrote `key` (any key when nil).
        func next(in channel: String, after revision: UInt64, key: String? = nil) -> CommittedWrite? {
            guard let writes = self.byRevision[channel] else { return nil }
            var candidate = revision + 1
            let last = self.latest[channel]?.majorRevision ?? 0
            while candidate <= last {
                if let write = writes[candidate], key.map({ write.items[$0] != nil }) ?? true { return write }
                candidate += 1
            }
            return nil
        }
    }

    // MARK: Writes

    private func checkWrites(_ replay: Replay) -> [HistoryViolation] {
        var violations: [HistoryViolation] = []
        for operation in self.operations {
            guard let value = operation.action.value else { continue }
            let committed = replay.writes[value]
            switch operation.outcome {
            case .written(let revision):
                guard let committed else {
                    violations.append(
                        HistoryViolation(kind: .lostWrite, detail: "\(Self.describe(operation)) is not in the feed"))
                    continue
                }
                if committed.channel != operation.channel || committed.revision != revision {
                    violations.append(
                        HistoryViolation(
                            kind: .wrongRevision,
                            detail: "\(Self.describe(operation)) was committed as \(committed.channel) r\(committed.revision)"))
                }
            case .refused(let code, _):
                if let committed {
                    violations.append(
                        HistoryViolation(
                            kind: .refusedWriteCommitted,
                            detail: "\(Self.describe(operation)) was answered \(code) but committed as r\(committed.revision)"))
                }
            case .unknown, .read:
                break
            }
        }
        return violations
    }

    private func checkCompareAndSet(_ replay: Replay) -> [HistoryViolation] {
        var violations: [HistoryViolation] = []
        var winners: [String: HistoryOperation] = [:]
        let responses = self.responseTimes()
        let invocations = self.invocationTimes()
        for operation in self.operations {
            switch (operation.action, operation.outcome) {
            case (.compareMajor(let expected, _, _), .written(let revision)):
                let slot = "major \(operation.channel) r\(expected)"
                if let other = winners[slot] {
                    violations.append(
                        HistoryViolation(
                            kind: .duplicateWinner,
                            detail: "\(Self.describe(other)) and \(Self.describe(operation)) both won on r\(expected)"))
                }
                winners[slot] = operation
                if revision != expected + 1 {
                    violations.append(
                        HistoryViolation(
                            kind: .compareMismatch,
                            detail: "\(Self.describe(operation)) expected r\(expected) and was told r\(revision)"))
                }
            case (.compareItem(let key, let expected, _), .written(let revision)):
                let slot = "item \(operation.channel) \(key) r\(expected)"
                if let other = winners[slot] {
                    violations.append(
                        HistoryViolation(
                            kind: .duplicateWinner,
                            detail: "\(Self.describe(other)) and \(Self.describe(operation)) both won on item \(key) r\(expected)"))
                }
                winners[slot] = operation
                guard revision > 0, replay.byRevision[operation.channel]?[revision] != nil else { continue }
                let before = replay.states[operation.channel]?[revision - 1]?.items[key]?.revision
                if before != expected {
                    violations.append(
                        HistoryViolation(
                            kind: .compareMismatch,
                            detail: "\(Self.describe(operation)) expected item \(key) r\(expected), which was r\(before.map(String.init) ?? "absent") below it"))
                }
            case (.compareMajor(let expected, _, _), .refused(let code, _)) where code == 5000 && expected > 0:
                // The expected revision was committed before the request and the next one not invoked before the answer.
                guard let current = replay.byRevision[operation.channel]?[expected], let value = current.items.values.first?.value,
                    let committedAt = responses[value], committedAt < operation.invokedAt
                else { continue }
                let next = replay.next(in: operation.channel, after: expected)
                let nextInvoked = next.flatMap { $0.items.values.first.flatMap { invocations[$0.value] } } ?? .infinity
                if next == nil || nextInvoked > operation.respondedAt {
                    violations.append(
                        HistoryViolation(
                            kind: .falseConflict,
                            detail: "\(Self.describe(operation)) was refused although r\(expected) was current from \(Self.time(committedAt)) s until after its answer"))
                }
            case (.compareItem(let key, let expected, _), .refused(let code, _)) where code == 5001:
                guard let current = replay.write(of: operation.channel, key: key, revision: expected),
                    let committedAt = current.items[key].flatMap({ responses[$0.value] }), committedAt < operation.invokedAt
                else { continue }
                let next = replay.next(in: operation.channel, after: current.revision, key: key)
                let nextInvoked = next.flatMap { $0.items[key].flatMap { invocations[$0.value] } } ?? .infinity
                if next == nil || nextInvoked > operation.respondedAt {
                    violations.append(
                        HistoryViolation(
                            kind: .falseConflict,
                            detail: "\(Self.describe(operation)) was refused although item \(key) r\(expected) was current from \(Self.time(committedAt)) s until after its answer"))
                }
            default:
                break
            }
        }
        return violations
    }

    /// Per set, in revision order: no write may have a higher revision than a write invoked after it was
    /// acknowledged.
    private func checkRealTimeOrder(_ replay: Replay) -> [HistoryViolation] {
        var byValue: [String: HistoryOperation] = [:]
        for operation in self.operations { if let value = operation.action.value { byValue[value] = operation } }
        var violations: [HistoryViolation] = []
        for (channel, writes) in replay.byRevision {
            // From the highest revision down: the earliest acknowledgement among the higher revisions.
            var earliest: (time: Double, operation: HistoryOperation)?
            for revision in writes.keys.sorted(by: >) {
                guard let value = writes[revision]!.items.values.first?.value, let operation = byValue[value] else { continue }
                if let earliest, earliest.time < operation.invokedAt {
                    violations.append(
                        HistoryViolation(
                            kind: .realTimeOrder,
                            detail: "\(channel): \(Self.describe(earliest.operation)) was acknowledged before "
                                + "\(Self.describe(operation)) was invoked, yet committed above it (r\(revision))"))
                }
                if operation.isAcknowledgedWrite, operation.respondedAt < (earliest?.time ?? .infinity) {
                    earliest = (operation.respondedAt, operation)
                }
            }
        }
        return violations
    }

    // MARK: Reads

    private func checkReads(_ replay: Replay) -> [HistoryViolation] {
        var refused: [String: HistoryOperation] = [:]
        for operation in self.operations {
            if case .refused = operation.outcome, let value = operation.action.value { refused[value] = operation }
        }
        var violations: [HistoryViolation] = []
        for operation in self.operations {
            guard case .read(let state) = operation.outcome else { continue }
            for item in state.items.values {
                if let write = refused[item.value] {
                    violations.append(
                        HistoryViolation(
                            kind: .refusedValueRead,
                            detail: "\(Self.describe(operation)) returned \(item.value), whose write \(Self.describe(write)) was refused"))
                }
            }
            if state.majorRevision == 0 {
                if !state.items.isEmpty {
                    violations.append(
                        HistoryViolation(kind: .foreignState, detail: "\(Self.describe(operation)) returned items without a revision"))
                }
                continue
            }
            guard let committed = replay.states[operation.channel]?[state.majorRevision] else {
                violations.append(
                    HistoryViolation(
                        kind: .uncommittedRevision,
                        detail: "\(Self.describe(operation)) returned \(state), a revision PostgreSQL never committed"))
                continue
            }
            if committed != state {
                violations.append(
                    HistoryViolation(
                        kind: .foreignState,
                        detail: "\(Self.describe(operation)) returned \(state); PostgreSQL committed \(committed) at that revision"))
            }
        }
        return violations
    }

    /// Each client's reads never go below its own acknowledged writes and earlier reads.
    private func checkClientFloors() -> [HistoryViolation] {
        var violations: [HistoryViolation] = []
        let byClient = Dictionary(grouping: self.operations, by: \.client)
        for (_, operations) in byClient {
            // channel -> (revision, the operation that set it)
            var floors: [String: (revision: UInt64, operation: HistoryOperation)] = [:]
            for operation in operations.sorted(by: { $0.invokedAt < $1.invokedAt }) {
                switch operation.outcome {
                case .written(let revision):
                    if revision > floors[operation.channel]?.revision ?? 0 { floors[operation.channel] = (revision, operation) }
                case .read(let state):
                    if !operation.catchUp, let floor = floors[operation.channel], state.majorRevision < floor.revision {
                        let what = floor.operation.action == .read ? "its earlier read" : "its own acknowledged write"
                        violations.append(
                            HistoryViolation(
                                kind: .staleRead,
                                detail: "\(Self.describe(operation)) returned r\(state.majorRevision), below \(what) \(Self.describe(floor.operation))"))
                    }
                    if state.majorRevision > floors[operation.channel]?.revision ?? 0 {
                        floors[operation.channel] = (state.majorRevision, operation)
                    }
                case .refused, .unknown:
                    break
                }
            }
        }
        return violations.sorted { $0.detail < $1.detail }
    }

    /// Every read shows each write acknowledged more than ``staleAfter`` seconds before it was invoked.
    private func checkStaleness() -> [HistoryViolation] {
        // channel -> acknowledged writes by response time, with the highest revision acknowledged up to each.
        var acknowledged: [String: [(time: Double, revision: UInt64, operation: HistoryOperation)]] = [:]
        for operation in self.operations {
            if case .written(let revision) = operation.outcome, operation.action != .read {
                acknowledged[operation.channel, default: []].append((operation.respondedAt, revision, operation))
            }
        }
        var highest: [String: [(time: Double, revision: UInt64, operation: HistoryOperation)]] = [:]
        for (channel, writes) in acknowledged {
            var running: [(time: Double, revision: UInt64, operation: HistoryOperation)] = []
            for write in writes.sorted(by: { $0.time < $1.time }) {
                if let last = running.last, last.revision >= write.revision {
                    running.append((write.time, last.revision, last.operation))
                } else {
                    running.append(write)
                }
            }
            highest[channel] = running
        }
        var violations: [HistoryViolation] = []
        for operation in self.operations {
            guard case .read(let state) = operation.outcome, let writes = highest[operation.channel] else { continue }
            // The last write acknowledged before invokedAt - staleAfter (binary search).
            let bound = operation.invokedAt - self.staleAfter
            var low = 0
            var high = writes.count
            while low < high {
                let middle = (low + high) / 2
                if writes[middle].time < bound { low = middle + 1 } else { high = middle }
            }
            guard low > 0 else { continue }
            let due = writes[low - 1]
            if state.majorRevision < due.revision {
                violations.append(
                    HistoryViolation(
                        kind: .lateRead,
                        detail: "\(Self.describe(operation)) returned r\(state.majorRevision), though \(Self.describe(due.operation)) "
                            + "was acknowledged \(Self.time(operation.invokedAt - due.time)) s before it was invoked"))
            }
        }
        return violations
    }

    // MARK: Helpers

    private func responseTimes() -> [String: Double] {
        var times: [String: Double] = [:]
        for operation in self.operations where operation.isAcknowledgedWrite {
            if let value = operation.action.value { times[value] = operation.respondedAt }
        }
        return times
    }

    private func invocationTimes() -> [String: Double] {
        var times: [String: Double] = [:]
        for operation in self.operations { if let value = operation.action.value { times[value] = operation.invokedAt } }
        return times
    }

    static func time(_ seconds: Double) -> String {
        String(Double((seconds * 1000).rounded()) / 1000)
    }

    /// "client 3 via node 1 [12.345-12.350 s] set hist1 a=c3.17 -> r42".
    static func describe(_ operation: HistoryOperation) -> String {
        let action: String
        switch operation.action {
        case .read: action = "read \(operation.channel)"
        case .set(let key, let value): action = "set \(operation.channel) \(key)=\(value)"
        case .compareMajor(let expected, let key, let value):
            action = "set \(operation.channel) \(key)=\(value) if r\(expected)"
        case .compareItem(let key, let expected, let value):
            action = "update \(operation.channel) \(key)=\(value) if item r\(expected)"
        }
        let outcome: String
        switch operation.outcome {
        case .read(let state): outcome = "\(state)"
        case .written(let revision): outcome = "r\(revision)"
        case .refused(let code, let current): outcome = current >= 0 ? "\(code) (current r\(current))" : "\(code)"
        case .unknown(let code): outcome = "unknown (\(code))"
        }
        let catchUp = operation.catchUp ? " catching up" : ""
        return "client \(operation.client) via node \(operation.node) [\(time(operation.invokedAt))-\(time(operation.respondedAt)) s]\(catchUp) \(action) -> \(outcome)"
    }
}
