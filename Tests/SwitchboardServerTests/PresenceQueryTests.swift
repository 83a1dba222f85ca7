import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Synchronization
import Testing

/// A clock tests move by hand.
final class PresenceTestClock: Sendable {
    private let millis = Atomic<Int64>(1_700_000_000_000)

    var now: Int64 { self.millis.load(ordering: .relaxed) }

    func advance(by milliseconds: Int64) {
        self.millis.add(milliseconds, ordering: .relaxed)
    }
}

/// Connects `users` and subscribes each to `channel` (by default without presence events), 32 at a time.
func joinPresenceChannel(
    _ fixture: PresenceFixture, _ users: [String], channel: String, type: ChannelType = .message, presence: Bool = false
) async throws -> [String: PresenceClient] {
    try await withThrowingTaskGroup(of: (String, PresenceClient).self) { group in
        var clients: [String: PresenceClient] = [:]
        var started = 0
        for user in users {
            if started >= 32, let (name, client) = try await group.next() { clients[name] = client }
            group.addTask {
                let client = try await fixture.connect(user)
                try await client.subscribe(channel, type: type, presence: presence)
                return (user, client)
            }
            started += 1
        }
        for try await (name, client) in group { clients[name] = client }
        return clients
    }
}

@Suite struct PresenceQueryTests {
    @Test func pagingWhileMembersComeAndGoListsEveryStayingUserExactlyOnce() async throws {
        try await withPresence(.testing()) { fixture in
            let initial = (0..<250).map { String(format: "u%03d", $0) }
            var clients = try await joinPresenceChannel(fixture, initial, channel: "hall")
            let watcher = try await fixture.connect("watcher")  // not a member: whoNow works anyway
            var present = Set(initial)
            var everGone = Set<String>()
            var seen: [String] = []

            func leave(_ users: [String]) async throws {
                for user in users {
                    try await clients[user]?.unsubscribe("hall")
                    present.remove(user)
                    everGone.insert(user)
                }
            }
            func join(_ users: [String]) async throws {
                let joined = try await joinPresenceChannel(fixture, users, channel: "hall")
                clients.merge(joined) { $1 }
                present.formUnion(users)
            }

            var page = try await watcher.whoNow("hall")
            #expect(page.totalOccupancy == 250 && page.users.count == 100 && !page.nextPage.isEmpty)
            seen += page.users.map(\.userId)
            #expect(seen == Array(initial[0..<100]))

            // Churn before each further page: members already listed and members not yet listed leave, new users
            // join before and after the bookmark, and a user who left comes back.
            try await leave((10..<20).map { String(format: "u%03d", $0) } + (150..<160).map { String(format: "u%03d", $0) })
            try await join(["a-early", "u0995", "u1995", "z-late"])
            page = try await watcher.whoNow("hall", page: page.nextPage)
            #expect(page.totalOccupancy == UInt64(present.count))
            #expect(page.users.count == 100)
            seen += page.users.map(\.userId)

            try await leave(["u240", "u241", "u050"])
            try await join(["u150", "u2405"])
            var pages = 2
            while !page.nextPage.isEmpty {
                page = try await watcher.whoNow("hall", page: page.nextPage)
                #expect(page.totalOccupancy == UInt64(present.count))
                seen += page.users.map(\.userId)
                pages += 1
            }
            #expect(pages == 3)
            #expect(page.nextPage.isEmpty)

            let stayed = Set(initial).subtracting(everGone)
            #expect(Set(seen).isSuperset(of: stayed))
            #expect(seen.count == Set(seen).count, "a user was listed twice")
            // Pages come in ascending byte order of user id.
            #expect(seen == seen.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) })
            #expect(!seen.contains("u155") && !seen.contains("u241") && !seen.contains("a-early"))
            #expect(seen.contains("z-late") && seen.contains("u1995"))
        }
    }

    @Test func withStatesAPageCarriesEachUsersState() async throws {
        try await withPresence { fixture in
            let users = try await joinPresenceChannel(fixture, (0..<120).map { "user\($0)" }, channel: "hall")
            try await users["user7"]?.setState("hall", ["mood": "busy"])
            let watcher = try await fixture.connect("watcher")
            let first = try await watcher.whoNow("hall", states: true)
            let second = try await watcher.whoNow("hall", states: true, page: first.nextPage)
            let all = first.users + second.users
            #expect(all.count == 120 && second.nextPage.isEmpty)
            #expect(all.first { $0.userId == "user7" }?.states == [StateItem(key: "mood", value: "busy")])
            #expect(all.filter { !$0.states.isEmpty }.count == 1)
            let withoutStates = try await watcher.whoNow("hall")
            #expect(withoutStates.users.allSatisfy { $0.states.isEmpty })
        }
    }

    @Test func aPageEndsExactlyAtTheLastMember() async throws {
        try await withPresence { fixture in
            _ = try await joinPresenceChannel(fixture, (0..<100).map { "user\($0)" }, channel: "hall")
            let watcher = try await fixture.connect("watcher")
            let page = try await watcher.whoNow("hall")
            #expect(page.users.count == 100 && page.nextPage.isEmpty && page.totalOccupancy == 100)
        }
    }

    @Test func countOnlyQueriesAndTheForbiddenFlagCombination() async throws {
        try await withPresence { fixture in
            _ = try await joinPresenceChannel(fixture, (0..<130).map { "user\($0)" }, channel: "hall")
            let watcher = try await fixture.connect("watcher")
            let count = try await watcher.whoNow("hall", userIDs: false, states: false)
            #expect(count.totalOccupancy == 130 && count.users.isEmpty && count.nextPage.isEmpty)
            #expect(await presenceError { _ = try await watcher.whoNow("hall", userIDs: false, states: true) } == .invalidArgument)
            let empty = try await watcher.whoNow("nobody-here")
            #expect(empty.totalOccupancy == 0 && empty.users.isEmpty && empty.nextPage.isEmpty)
            #expect(try await watcher.whoNow("hall", type: .stream).totalOccupancy == 0)
            #expect(await presenceError { _ = try await watcher.whoNow("") } == .invalidArgument)
        }
    }

    @Test func forgedAndStaleBookmarksAreInvalidPages() async throws {
        let clock = PresenceTestClock()
        var configuration = PresenceConfiguration.testing()
        configuration.bookmarkLifetime = .seconds(60)
        try await withPresence(configuration, nowMillis: { clock.now }) { fixture in
            _ = try await joinPresenceChannel(fixture, (0..<150).map { "user\($0)" }, channel: "hall")
            let watcher = try await fixture.connect("watcher")
            let bookmark = try await watcher.whoNow("hall").nextPage
            #expect(try await watcher.whoNow("hall", page: bookmark).users.count == 50)

            var tampered = Array(bookmark.utf8)
            tampered[30] = tampered[30] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
            // A bookmark naming another position, with the signature of the real one.
            let moved = bookmark.dropLast(2) + (bookmark.hasSuffix("30") ? "31" : "30")
            for forged in ["garbage", "zz", "", String(decoding: tampered, as: UTF8.self), String(moved), bookmark + "00"]
            where !forged.isEmpty {
                #expect(await presenceError { _ = try await watcher.whoNow("hall", page: forged) } == .invalidPage, "\(forged)")
            }
            // Issued for another channel (same name, other type; other name).
            #expect(await presenceError { _ = try await watcher.whoNow("hall", type: .stream, page: bookmark) } == .invalidPage)
            #expect(await presenceError { _ = try await watcher.whoNow("hall2", page: bookmark) } == .invalidPage)
            // Stale: older than the bookmark lifetime.
            clock.advance(by: 61_000)
            #expect(await presenceError { _ = try await watcher.whoNow("hall", page: bookmark) } == .invalidPage)
            let fresh = try await watcher.whoNow("hall").nextPage
            #expect(try await watcher.whoNow("hall", page: fresh).users.count == 50)
        }
    }

    @Test func whereNowListsMessageAndStreamChannelsOfTheSameName() async throws {
        try await withPresence { fixture in
            let alice = try await fixture.connect("alice")
            try await alice.subscribe("lobby", presence: false)
            try await alice.subscribe("lobby", type: .stream, presence: false)
            try await alice.subscribe("games", presence: false)
            let bob = try await fixture.connect("bob")
            let expected = [
                ChannelRef(channel: "games", channelType: .message), ChannelRef(channel: "lobby", channelType: .message),
                ChannelRef(channel: "lobby", channelType: .stream),
            ]
            let own = try await alice.whereNow()
            #expect(own.channels == expected && own.totalChannel == 3)
            let asked = try await bob.whereNow("alice")
            #expect(asked.channels == expected && asked.totalChannel == 3)
            #expect(try await bob.whereNow().totalChannel == 0)
            #expect(try await bob.whereNow("nobody").channels.isEmpty)
            #expect(await presenceError { _ = try await bob.whereNow(String(repeating: "u", count: 65)) } == .identifierTooLong)

            // The two "lobby" channels are different channels.
            try await bob.subscribe("lobby", type: .stream, presence: false)
            #expect(try await alice.allMembers("lobby") == ["alice"])
            #expect(try await alice.allMembers("lobby", type: .stream) == ["alice", "bob"])
        }
    }

    @Test func stateIsSetReadAndRemovedWithinItsLimits() async throws {
        try await withPresence { fixture in
            let bob = try await fixture.connect("bob")
            #expect(await presenceError { try await bob.setState("lobby", ["a": "1"]) } == .notSubscribed)
            #expect(await presenceError { try await bob.removeState("lobby") } == .notSubscribed)
            #expect(await presenceError { _ = try await bob.getState("lobby") } == .userNotPresent)
            try await bob.subscribe("lobby", presence: false)
            #expect(try await bob.getState("lobby") == [:])

            try await bob.setState("lobby", ["mood": "happy", "game": "chess"])
            try await bob.setState("lobby", ["mood": "sad", "level": "3"])
            #expect(try await bob.getState("lobby") == ["mood": "sad", "game": "chess", "level": "3"])
            try await bob.removeState("lobby", keys: ["game", "not-there"])
            #expect(try await bob.getState("lobby") == ["mood": "sad", "level": "3"])
            try await bob.removeState("lobby")
            #expect(try await bob.getState("lobby") == [:])

            // Keys, duplicates, empty calls.
            #expect(await presenceError { try await bob.setState("lobby", ["": "x"]) } == .keyTooLong)
            #expect(await presenceError { try await bob.setState("lobby", [String(repeating: "k", count: 33): "x"]) } == .keyTooLong)
            try await bob.setState("lobby", [String(repeating: "k", count: 32): "x"])
            #expect(await presenceError { try await bob.setState("lobby", ["a": "1", "a": "2"]) } == .duplicateKey)
            #expect(await presenceError { try await bob.setState("lobby", items: []) } == .invalidArgument)

            // 32 pairs, 8192 bytes per user and channel; a failed call changes nothing.
            try await bob.removeState("lobby")
            let thirtyTwo = (0..<32).map { StateItem(key: "k\($0)", value: "v") }
            try await bob.setState("lobby", items: thirtyTwo)
            #expect(await presenceError { try await bob.setState("lobby", ["one-more": "v"]) } == .stateTooLarge)
            try await bob.setState("lobby", ["k0": "overwriting is fine"])
            #expect(try await bob.getState("lobby").count == 32)
            #expect(
                await presenceError { try await bob.setState("lobby", items: (0..<33).map { StateItem(key: "n\($0)") }) }
                    == .stateTooLarge)
            try await bob.removeState("lobby")
            try await bob.setState("lobby", ["big": String(repeating: "x", count: 8192 - 3)])
            #expect(await presenceError { try await bob.setState("lobby", ["b": ""]) } == .stateTooLarge)
            #expect(await presenceError { try await bob.setState("lobby", ["big": String(repeating: "x", count: 8190)]) } == .stateTooLarge)
            #expect(try await bob.getState("lobby")["big"]?.utf8.count == 8189)
        }
    }

    @Test func stateIsSharedByAUsersDevicesAndClearedWhenTheUserLeaves() async throws {
        try await withPresence(.testing()) { fixture in
            let phone = try await fixture.connect("bob", device: "phone")
            let laptop = try await fixture.connect("bob", device: "laptop")
            try await phone.subscribe("lobby", presence: false)
            #expect(await presenceError { try await laptop.setState("lobby", ["a": "1"]) } == .notSubscribed)
            try await laptop.subscribe("lobby", presence: false)
            try await phone.setState("lobby", ["where": "phone"])
            try await laptop.setState("lobby", ["screen": "big"])
            #expect(try await laptop.getState("lobby") == ["where": "phone", "screen": "big"])
            #expect(try await phone.getState("lobby") == ["where": "phone", "screen": "big"])
            let alice = try await fixture.connect("alice")
            #expect(try await alice.getState("lobby", of: "bob") == ["where": "phone", "screen": "big"])

            // One device leaving keeps the state; the last one leaving clears it.
            try await laptop.unsubscribe("lobby")
            #expect(try await alice.getState("lobby", of: "bob") == ["where": "phone", "screen": "big"])
            try await phone.unsubscribe("lobby")
            #expect(await presenceEventually { await presenceError { _ = try await alice.getState("lobby", of: "bob") } == .userNotPresent })
            try await phone.subscribe("lobby", presence: false)
            #expect(try await phone.getState("lobby") == [:])
        }
    }
}
