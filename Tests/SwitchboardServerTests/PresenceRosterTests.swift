#if canImport(Glibc)
import Glibc
#endif
import NIOCore
@testable import SwitchboardServer
import SwitchboardWire
import Testing

/// The data structures behind `whoNow`, measured without the network.
@Suite struct PresenceRosterTests {
    @Test func theSortedUserListKeepsByteOrderThroughRandomInsertsAndRemoves() {
        var generator = PresenceRandom(seed: 7)
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

    /// CPU time of this thread: the server-side cost, without the time other tests running in parallel take.
    private func threadCPUTime(_ body: () -> Void) -> Duration {
        var start = timespec()
        var end = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start)
        body()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end)
        return .seconds(end.tv_sec - start.tv_sec) + .nanoseconds(end.tv_nsec - start.tv_nsec)
    }

    @Test func aPageOfAHundredThousandMemberChannelTakesUnderAMillisecond() {
        var generator = PresenceRandom(seed: 42)
        let channel = PresenceChannel(key: ChannelKey(name: "stadium", type: .message))
        var ids: [String] = []
        ids.reserveCapacity(100_000)
        let joinTime = threadCPUTime {
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
        }
        #expect(channel.visible.count == 100_000)
        #expect(joinTime < .seconds(5), "100,000 joins took \(joinTime) of CPU time")

        let bookmarks = PageBookmarks(lifetime: .minutes(10))
        let key = channel.key
        var durations: [Duration] = []
        var bookmark: String?
        var pageSizes = 0
        for request in 0..<2_000 {
            let elapsed = threadCPUTime {
                var after: String?
                if let bookmark, case .success(let userID) = bookmarks.verify(bookmark, channel: key, nowMillis: 1_000) {
                    after = userID
                }
                let page = channel.page(after: after, limit: 100, includeState: true)
                pageSizes += page.users.count
                bookmark = page.last.map { bookmarks.issue(channel: key, lastUserID: $0, nowMillis: 1_000) }
            }
            durations.append(elapsed)
            // Restart the walk at a random member now and then.
            if request % 10 == 0 {
                let start = ids[Int(generator.next() % UInt64(ids.count - 1_000))]
                bookmark = bookmarks.issue(channel: key, lastUserID: start, nowMillis: 1_000)
            }
        }
        #expect(pageSizes > 1_900 * 100, "most pages should be full")
        durations.sort()
        let p99 = durations[durations.count * 99 / 100]
        #expect(p99 < .milliseconds(1), "p99 \(p99), median \(durations[durations.count / 2])")
    }
}

/// A small deterministic generator for reproducible test data.
struct PresenceRandom: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { self.state = seed }

    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
