import Testing

/// ``HistoryChecker`` on hand-made histories: a clean one passes, and each defect it exists for is found.
@Suite("History checker")
struct HistoryCheckerTests {
    // Client 0 writes r1 and r2 of "room" through node 0; client 1 reads through node 1.
    static let first = CommittedWrite(feedID: 10, channel: "room", revision: 1, items: ["k": .init(value: "c0.1", revision: 1)])
    static let second = CommittedWrite(feedID: 11, channel: "room", revision: 2, items: ["k": .init(value: "c0.2", revision: 2)])

    static func state(_ revision: UInt64, _ value: String) -> MetadataState {
        MetadataState(majorRevision: revision, items: ["k": .init(value: value, revision: Int64(revision))])
    }

    static func operation(
        client: Int, node: Int = 0, _ action: HistoryOperation.Action, _ outcome: HistoryOperation.Outcome,
        at time: Double, catchUp: Bool = false
    ) -> HistoryOperation {
        HistoryOperation(
            client: client, node: node, channel: "room", action: action, invokedAt: time, respondedAt: time + 0.01,
            outcome: outcome, catchUp: catchUp)
    }

    static let cleanHistory: [HistoryOperation] = [
        operation(client: 0, .set(key: "k", value: "c0.1"), .written(revision: 1), at: 1),
        operation(client: 1, node: 1, .read, .read(MetadataState()), at: 1),  // concurrent with the write
        operation(client: 0, .compareMajor(expected: 1, key: "k", value: "c0.2"), .written(revision: 2), at: 2),
        operation(client: 1, node: 1, .read, .read(state(1, "c0.1")), at: 2.005),  // a few ms behind: allowed
        operation(client: 1, node: 1, .compareItem(key: "k", expected: 1, value: "c1.1"), .refused(code: 5001, currentRevision: 2), at: 2.02),
        operation(client: 0, .read, .read(state(2, "c0.2")), at: 3),
        operation(client: 1, node: 1, .read, .read(state(2, "c0.2")), at: 3),
    ]

    @Test("a history that keeps every rule passes, and its final state matches")
    func aCleanHistoryPasses() {
        let checker = HistoryChecker(operations: Self.cleanHistory, committed: [Self.first, Self.second])
        #expect(checker.check() == [])
        let final = ["room": Self.state(2, "c0.2")]
        #expect(checker.checkFinal(database: final, nodes: [0: final, 1: final]) == [])
    }

    @Test("a dirty read: a value read before its write was refused with 8001, and never committed")
    func aDirtyReadIsFound() {
        let history = Self.cleanHistory + [
            Self.operation(client: 2, node: 2, .set(key: "k", value: "c2.1"), .refused(code: 8001, currentRevision: -1), at: 4),
            Self.operation(client: 1, node: 2, .read, .read(Self.state(3, "c2.1")), at: 3.5),
        ]
        let kinds = Set(HistoryChecker(operations: history, committed: [Self.first, Self.second]).check().map(\.kind))
        #expect(kinds == [.uncommittedRevision, .refusedValueRead])
    }

    @Test("a revision PostgreSQL gave to a different write, read with another value")
    func aForeignRevisionIsFound() {
        let history = Self.cleanHistory + [
            Self.operation(client: 2, node: 2, .set(key: "k", value: "c2.1"), .unknown(code: 8003), at: 1.5),
            Self.operation(client: 2, node: 2, .read, .read(Self.state(2, "c2.1")), at: 3),
        ]
        let violations = HistoryChecker(operations: history, committed: [Self.first, Self.second]).check()
        #expect(violations.map(\.kind) == [.foreignState])
    }

    @Test("a stale read: below the reader's own acknowledged write, and later below an earlier read")
    func aStaleReadIsFound() {
        let ownWrite = Self.cleanHistory + [Self.operation(client: 0, node: 0, .read, .read(Self.state(1, "c0.1")), at: 2.5)]
        let violations = HistoryChecker(operations: ownWrite, committed: [Self.first, Self.second]).check()
        #expect(violations.map(\.kind) == [.staleRead])
        #expect(violations.first?.detail.contains("own acknowledged write") == true)

        let earlierRead = Self.cleanHistory + [Self.operation(client: 1, node: 1, .read, .read(Self.state(1, "c0.1")), at: 3.5)]
        let backwards = HistoryChecker(operations: earlierRead, committed: [Self.first, Self.second]).check()
        #expect(backwards.map(\.kind) == [.staleRead])
        #expect(backwards.first?.detail.contains("earlier read") == true)

        // While catching up after a reconnect a read may be behind; the next one may not.
        let catchingUp = Self.cleanHistory + [
            Self.operation(client: 0, node: 2, .read, .read(Self.state(1, "c0.1")), at: 3.1, catchUp: true),
            Self.operation(client: 0, node: 2, .read, .read(Self.state(2, "c0.2")), at: 3.2, catchUp: true),
        ]
        #expect(HistoryChecker(operations: catchingUp, committed: [Self.first, Self.second]).check() == [])
    }

    @Test("a late read: a node still behind a write acknowledged more than staleAfter earlier")
    func aLateReadIsFound() {
        let history = Self.cleanHistory + [Self.operation(client: 2, node: 2, .read, .read(Self.state(1, "c0.1")), at: 9)]
        let violations = HistoryChecker(operations: history, committed: [Self.first, Self.second], staleAfter: 5).check()
        #expect(violations.map(\.kind) == [.lateRead])
        let inTime = Self.cleanHistory + [Self.operation(client: 2, node: 2, .read, .read(Self.state(1, "c0.1")), at: 6)]
        #expect(HistoryChecker(operations: inTime, committed: [Self.first, Self.second], staleAfter: 5).check() == [])
    }

    @Test("a lost write: acknowledged, but not in PostgreSQL's feed")
    func aLostWriteIsFound() {
        let history = Self.cleanHistory + [
            Self.operation(client: 2, node: 2, .set(key: "k", value: "c2.1"), .written(revision: 3), at: 4)
        ]
        let violations = HistoryChecker(operations: history, committed: [Self.first, Self.second]).check()
        #expect(violations.map(\.kind) == [.lostWrite])
        // Its node still serving it at the end differs from PostgreSQL.
        let final = ["room": Self.state(2, "c0.2")]
        let differs = HistoryChecker(operations: history, committed: [Self.first, Self.second])
            .checkFinal(database: final, nodes: [2: ["room": Self.state(3, "c2.1")], 0: final])
        #expect(differs.map(\.kind) == [.finalStateDiffers])
    }

    @Test("a write answered with an error that PostgreSQL committed")
    func aRefusedWriteThatCommittedIsFound() {
        let third = CommittedWrite(feedID: 12, channel: "room", revision: 3, items: ["k": .init(value: "c2.1", revision: 3)])
        let history = Self.cleanHistory + [
            Self.operation(client: 2, node: 2, .set(key: "k", value: "c2.1"), .refused(code: 8001, currentRevision: -1), at: 4)
        ]
        let violations = HistoryChecker(operations: history, committed: [Self.first, Self.second, third]).check()
        #expect(violations.map(\.kind) == [.refusedWriteCommitted])
    }

    @Test("two compare-and-set winners on one revision (and PostgreSQL giving one revision twice)")
    func aDuplicateWinnerIsFound() {
        let rival = CommittedWrite(feedID: 12, channel: "room", revision: 2, items: ["k": .init(value: "c1.1", revision: 2)])
        let history = Self.cleanHistory + [
            Self.operation(client: 1, node: 1, .compareMajor(expected: 1, key: "k", value: "c1.1"), .written(revision: 2), at: 2.01)
        ]
        let kinds = HistoryChecker(operations: history, committed: [Self.first, Self.second, rival]).check().map(\.kind)
        #expect(kinds.contains(.duplicateWinner))
        #expect(kinds.contains(.duplicateRevision))

        // Item compare-and-set: two winners over item revision 1, committed one after the other.
        let itemRival = CommittedWrite(feedID: 12, channel: "room", revision: 3, items: ["k": .init(value: "c1.1", revision: 3)])
        let items = Self.cleanHistory.filter { $0.client == 0 } + [
            Self.operation(client: 1, node: 1, .compareItem(key: "k", expected: 1, value: "c1.1"), .written(revision: 3), at: 2.01)
        ]
        let itemKinds = HistoryChecker(operations: items, committed: [Self.first, Self.second, itemRival]).check().map(\.kind)
        #expect(itemKinds.contains(.compareMismatch))
    }

    @Test("writes out of real-time order, and a compare-and-set refused while its revision was current")
    func realTimeViolationsAreFound() {
        // c0.1 acknowledged at 1.01; c1.1 invoked at 2 gets revision 1 and c0.1 revision 2.
        let swapped = [
            CommittedWrite(feedID: 10, channel: "room", revision: 1, items: ["k": .init(value: "c1.1", revision: 1)]),
            CommittedWrite(feedID: 11, channel: "room", revision: 2, items: ["k": .init(value: "c0.1", revision: 2)]),
        ]
        let history = [
            Self.operation(client: 0, .set(key: "k", value: "c0.1"), .written(revision: 2), at: 1),
            Self.operation(client: 1, .set(key: "k", value: "c1.1"), .written(revision: 1), at: 2),
        ]
        #expect(HistoryChecker(operations: history, committed: swapped).check().map(\.kind) == [.realTimeOrder])

        let refused = [
            Self.operation(client: 0, .set(key: "k", value: "c0.1"), .written(revision: 1), at: 1),
            Self.operation(client: 1, node: 1, .compareMajor(expected: 1, key: "k", value: "c1.1"), .refused(code: 5000, currentRevision: 0), at: 2),
        ]
        #expect(HistoryChecker(operations: refused, committed: [Self.first]).check().map(\.kind) == [.falseConflict])
    }
}
