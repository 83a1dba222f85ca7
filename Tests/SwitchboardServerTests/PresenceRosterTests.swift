import NIOCore
@testable import SwitchboardServer
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The data structures behind `whoNow`: the sorted member list, pages and bookmarks.
@Suite struct PresenceRosterTests {
    @Test func theSortedUserListKeepsByteOrderThroughRandomInsertsAndRemoves() {
        var generator = SplitMix64(seed: 7)
        var list = SortedUserList()
        // Compared as bytes: String equality is canonical equivalence, which would merge "é" and "e\u{301}".
        var reference = Set<[UInt8]>()
        let alphabet = ["a", "b", "z", "0", "é", "e\u{301}", "日", "Z", "-"]
        for step in 0..<20_000 {
            let length = Int(generator.next() % 4) + 1
            let id = (0..<length).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] }.joined()
            let bytes = Array(id.utf8)
            if generator.next() % 3 == 0 {
                #expect(list.remove(id) == (reference.remove(bytes) != nil))
            } else {
                #expect(list.insert(id) == reference.insert(bytes).inserted)
            }
            if step % 2_000 == 0 {
                #expect(list.all().map { Array($0.utf8) } == reference.sorted { $0.lexicographicallyPrecedes($1) })
            }
        }
        let sorted = reference.sorted { $0.lexicographicallyPrecedes($1) }
        #expect(list.count == sorted.count)
        // Pages after every position, including ids that are not members.
        let positions = ["", "a", "b0", "zz", "é", "\u{10FFFF}"] + sorted.prefix(50).map { String(decoding: $0, as: UTF8.self) }
        for after in positions {
            let page = list.page(after: after.isEmpty ? nil : after, limit: 7)
            let expected = sorted.filter { after.isEmpty || Array(after.utf8).lexicographicallyPrecedes($0) }
            #expect(page.ids.map { Array($0.utf8) } == Array(expected.prefix(7)))
            #expect(page.hasMore == (expected.count > 7))
        }
    }

    @Test func aWalkThroughAHundredThousandMemberChannelListsEveryMemberOnceInByteOrderWithItsState() {
        var generator = SplitMix64(seed: 42)
        let channel = PresenceChannel(key: ChannelKey(name: "stadium", type: .message))
        var ids: [String] = []
        ids.reserveCapacity(100_000)
        for index in 0..<100_000 {
            let id = "user-\(generator.next() % 1_000_000_000)-\(index)"
            ids.append(id)
            var member = PresenceMember(userID: id)
            member.visible = true
            if index % 10 == 0 {
                member.state = member.state.setting([StateItem(key: "seat", value: "\(index)")])
            }
            channel.members[id] = member
            channel.visible.insert(id)
        }
        #expect(channel.visible.count == 100_000)
        let sorted = ids.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }

        let bookmarks = PageBookmarks(lifetime: .minutes(10))
        let key = channel.key
        var listed: [String] = []
        listed.reserveCapacity(ids.count)
        var bookmark: String?
        var pages = 0
        repeat {
            var after: String?
            if let bookmark {
                guard case .success(let userID) = bookmarks.verify(bookmark, channel: key, nowMillis: 1_000) else {
                    Issue.record("the bookmark after page \(pages) was refused")
                    return
                }
                #expect(userID == listed.last, "a bookmark names the last user of its page")
                after = userID
            }
            let page = channel.page(after: after, limit: 100, includeState: true)
            pages += 1
            #expect(page.users.count == 100, "every page of 100,000 members is full")
            for user in page.users {
                let index = Int(user.userId.split(separator: "-").last ?? "") ?? -1
                let state = index % 10 == 0 ? [StateItem(key: "seat", value: "\(index)")] : []
                #expect(user.states == state, "state of \(user.userId)")
            }
            listed.append(contentsOf: page.users.map(\.userId))
            bookmark = page.last.map { bookmarks.issue(channel: key, lastUserID: $0, nowMillis: 1_000) }
            #expect((bookmark == nil) == (listed.count == ids.count), "a bookmark on every page but the last")
        } while bookmark != nil && pages <= 1_000
        #expect(pages == 1_000)
        // In byte order, each member exactly once.
        #expect(listed == sorted)

        // A bookmark starts its page right after the member it names, for a member anywhere in the list.
        for position in [0, 511, 512, 50_000, 99_899] {
            let named = bookmarks.issue(channel: key, lastUserID: sorted[position], nowMillis: 1_000)
            guard case .success(let userID) = bookmarks.verify(named, channel: key, nowMillis: 1_000) else {
                Issue.record("the bookmark of member \(position) was refused")
                continue
            }
            let page = channel.page(after: userID, limit: 100, includeState: false)
            #expect(page.users.map(\.userId) == Array(sorted[(position + 1)..<(position + 101)]))
        }
        // Bookmarks are bound to their channel, signed and expire.
        let issued = bookmarks.issue(channel: key, lastUserID: sorted[10], nowMillis: 1_000)
        let otherChannel = ChannelKey(name: "stadium", type: .stream)
        #expect(bookmarks.verify(issued, channel: otherChannel, nowMillis: 1_000) == .failure(.forged))
        #expect(PageBookmarks(lifetime: .minutes(10)).verify(issued, channel: key, nowMillis: 1_000) == .failure(.forged))
        #expect(bookmarks.verify(issued, channel: key, nowMillis: 1_000 + 10 * 60_000 + 1) == .failure(.expired))
    }
}

