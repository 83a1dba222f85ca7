import Histogram
import SwitchboardWire
import Testing

@testable import sbbench

/// The `whonow-inprocess` scenario: its run over the in-process gateway, and the page check that decides whether a
/// run is broken.
@Suite struct WhoNowInProcessTests {
    @Test("walks through a 300-member channel list every member once, in order, with their states", arguments: [false, true])
    func everyWalkListsEveryMemberOnce(compression: Bool) throws {
        let result = try WhoNowInProcessBench(members: 300, walks: 2, compression: compression).run()
        #expect(result.failures == [])
        #expect(result.completeWalks == 2)
        #expect(result.pages == 6)
        #expect(result.listed == 600)
        #expect(result.latencies.totalCount == 6)
        var report = BenchReport()
        result.add(to: &report)
        #expect(report.isValid, "\(report.failures)")
    }

    private static let members = ["a", "b", "c"]
    private static let states = ["b": [StateItem(key: "seat", value: "2")]]

    private static func user(_ id: String) -> UserState {
        UserState(userId: id, states: Self.states[id] ?? [])
    }

    private func walk(_ pages: [WhoNowResponse]) -> (check: WhoNowWalkCheck, problems: [String]) {
        var check = WhoNowWalkCheck(members: Self.members, states: Self.states, pageSize: 2)
        let problems = pages.compactMap { check.check($0) }
        return (check, problems)
    }

    @Test("a walk of full pages in byte order, with a bookmark on all but the last, passes")
    func rightWalkPasses() {
        let (check, problems) = self.walk([
            WhoNowResponse(totalOccupancy: 3, users: [Self.user("a"), Self.user("b")], nextPage: "after-b"),
            WhoNowResponse(totalOccupancy: 3, users: [Self.user("c")]),
        ])
        #expect(problems == [])
        #expect(check.isComplete && check.listed == 3 && check.pages == 2)
    }

    @Test("a repeated, skipped or reordered member, a wrong state or occupancy, and a misplaced bookmark are each found")
    func wrongPagesAreFound() {
        let wrongFirstPages = [
            WhoNowResponse(totalOccupancy: 3, users: [Self.user("a"), Self.user("a")], nextPage: "x"),
            WhoNowResponse(totalOccupancy: 3, users: [Self.user("a"), Self.user("c")], nextPage: "x"),
            WhoNowResponse(totalOccupancy: 3, users: [Self.user("b"), Self.user("a")], nextPage: "x"),
            WhoNowResponse(totalOccupancy: 3, users: [Self.user("a"), UserState(userId: "b")], nextPage: "x"),
            WhoNowResponse(totalOccupancy: 4, users: [Self.user("a"), Self.user("b")], nextPage: "x"),
            WhoNowResponse(totalOccupancy: 3, users: [Self.user("a")], nextPage: "x"),
            WhoNowResponse(totalOccupancy: 3, users: [Self.user("a"), Self.user("b")]),
        ]
        for page in wrongFirstPages {
            let (check, problems) = self.walk([page])
            #expect(problems.count == 1, "\(page)")
            #expect(!check.isComplete)
        }
        let bookmarkOnLast = self.walk([
            WhoNowResponse(totalOccupancy: 3, users: [Self.user("a"), Self.user("b")], nextPage: "after-b"),
            WhoNowResponse(totalOccupancy: 3, users: [Self.user("c")], nextPage: "after-c"),
        ])
        #expect(bookmarkOnLast.problems.count == 1 && !bookmarkOnLast.check.isComplete)
    }
}
