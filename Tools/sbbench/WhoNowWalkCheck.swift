import SwitchboardWire

/// Checks one walk through a channel's `whoNow` pages (the first page, then each `nextPage` in turn) against the
/// members the channel must list: every page has `totalOccupancy` equal to the member count, lists the next members in
/// ascending byte order of user id with the states they set, is full except the last, and carries a `nextPage`
/// exactly when more members follow. A walk that passes listed every member exactly once.
struct WhoNowWalkCheck {
    /// Every member, in ascending byte order of user id.
    let members: [String]
    /// The state of each member that set one.
    let states: [String: [StateItem]]
    /// Users in a full page.
    let pageSize: Int
    /// Members listed so far.
    private(set) var listed = 0
    /// Pages checked so far.
    private(set) var pages = 0
    /// The last page (without `nextPage`) arrived and passed.
    private(set) var isComplete = false

    init(members: [String], states: [String: [StateItem]], pageSize: Int) {
        self.members = members
        self.states = states
        self.pageSize = pageSize
    }

    /// Checks the walk's next page.
    ///
    /// - Returns: what is wrong with the page, or nil when it is right.
    mutating func check(_ page: WhoNowResponse) -> String? {
        self.pages += 1
        let number = self.pages
        guard !self.isComplete else { return "page \(number) follows the last page" }
        guard page.totalOccupancy == UInt64(self.members.count) else {
            return "page \(number) has totalOccupancy \(page.totalOccupancy), not \(self.members.count)"
        }
        let due = min(self.pageSize, self.members.count - self.listed)
        guard page.users.count == due else { return "page \(number) lists \(page.users.count) users, not \(due)" }
        for user in page.users {
            let expected = self.members[self.listed]
            guard user.userId.utf8.elementsEqual(expected.utf8) else {
                return "page \(number) lists \(user.userId) where \(expected) is due (out of order, repeated or skipped)"
            }
            let state = self.states[expected] ?? []
            guard user.states == state else {
                return "page \(number) gives \(expected) the state \(user.states), not \(state)"
            }
            self.listed += 1
        }
        let isLast = self.listed == self.members.count
        guard page.nextPage.isEmpty == isLast else {
            return isLast
                ? "the last page (\(number)) has a nextPage"
                : "page \(number) has no nextPage with \(self.members.count - self.listed) members not listed"
        }
        self.isComplete = isLast
        return nil
    }
}
