import SwitchboardStore
import SwitchboardWire
import Synchronization
import Testing

/// The presence domain without sockets: sessions are plain objects, timers a manual scheduler.
/// Records what the registry sends and schedules.
private final class PresenceRecorder: Sendable {
    let sent = Mutex<[(events: [PresenceEvent], channel: ChannelKey, aboutUser: String?)]>([])
    let timers = Mutex<[@Sendable () -> Void]>([])

    func make(_ configure: (inout PresenceLimits) -> Void = { _ in }) -> PresenceRegistry {
        var limits = PresenceLimits()
        configure(&limits)
        return PresenceRegistry(
            limits: limits, nowMillis: { 5_000 },
            schedule: { [self] _, work in self.timers.withLock { $0.append(work) } },
            broadcast: { [self] pushes, channel, about, _ in self.sent.withLock { $0.append((pushes.events, channel, about)) } })
    }

    /// Runs the timers scheduled so far (not ones they schedule).
    func fireTimers() {
        let due = self.timers.withLock { timers in
            defer { timers = [] }
            return timers
        }
        for work in due { work() }
    }

    func takeSent() -> [(events: [PresenceEvent], channel: ChannelKey, aboutUser: String?)] {
        self.sent.withLock { sent in
            defer { sent = [] }
            return sent
        }
    }
}

private final class PresenceTestSession: Sendable {
    let user: String
    init(_ user: String) { self.user = user }
    var id: PresenceSessionID { ObjectIdentifier(self) }
}

private let hall = ChannelKey(name: "hall", type: .message)

@discardableResult
private func join(_ registry: PresenceRegistry, _ session: PresenceTestSession, _ key: ChannelKey = hall, quiet: Bool = false)
    -> [PresenceEvent]
{
    var snapshot: [PresenceEvent] = []
    let admitted = registry.subscribe(
        session.id, userID: session.user, to: key, quiet: quiet, now: 5_000, admit: { true },
        snapshotTo: { snapshot = $0.events })
    #expect(admitted)
    return snapshot
}

@Suite struct PresenceRegistryTests {
    @Test func joinStateAndLeaveAreAnnouncedAboutTheMember() throws {
        let recorder = PresenceRecorder()
        let registry = recorder.make()
        let ann = PresenceTestSession("ann")
        let bob = PresenceTestSession("bob")
        #expect(join(registry, ann).first?.snapshot.map(\.userId) == ["ann"])
        let snapshot = join(registry, bob)
        #expect(snapshot.first?.snapshot.map(\.userId) == ["ann", "bob"])
        var sent = recorder.takeSent()
        #expect(sent.map { $0.events[0].eventType } == [.remoteJoin, .remoteJoin])
        #expect(sent.map(\.aboutUser) == ["ann", "bob"])
        #expect(sent[1].events[0].totalOccupancy == 2)

        try registry.setState([StateItem(key: "mood", value: "up")], of: bob.id, userID: "bob", in: hall, now: 5_000)
        // The same state again changes nothing and says nothing.
        try registry.setState([StateItem(key: "mood", value: "up")], of: bob.id, userID: "bob", in: hall, now: 5_000)
        sent = recorder.takeSent()
        #expect(sent.count == 1)
        #expect(sent[0].events[0].eventType == .remoteStateChanged)
        #expect(sent[0].events[0].states == [StateItem(key: "mood", value: "up")])
        #expect(try registry.state(of: "bob", in: hall, asSeenBy: "ann").items == [StateItem(key: "mood", value: "up")])
        #expect(throws: SwitchboardStoreError.self) {
            try registry.setState([StateItem(key: "", value: "x")], of: bob.id, userID: "bob", in: hall, now: 5_000)
        }
        try registry.removeState([], of: bob.id, userID: "bob", in: hall, now: 5_000)
        #expect(recorder.takeSent().map { $0.events[0].eventType } == [.remoteStateChanged])

        try registry.unsubscribe(bob.id, userID: "bob", from: hall, now: 5_000) {}
        sent = recorder.takeSent()
        #expect(sent.map { $0.events[0].eventType } == [.remoteLeave])
        #expect(sent[0].events[0].totalOccupancy == 1)
        #expect(throws: SwitchboardStoreError.self) { try registry.unsubscribe(bob.id, userID: "bob", from: hall, now: 5_000) {} }
        #expect(throws: SwitchboardStoreError.self) { _ = try registry.state(of: "bob", in: hall, asSeenBy: "ann") }
    }

    @Test func aRefusedAdmissionChangesNothing() {
        let recorder = PresenceRecorder()
        let registry = recorder.make()
        let ann = PresenceTestSession("ann")
        let admitted = registry.subscribe(
            ann.id, userID: "ann", to: hall, quiet: false, now: 5_000, admit: { false }, snapshotTo: nil)
        #expect(!admitted)
        #expect(!registry.contains(ann.id, in: hall))
        #expect(registry.whoNow(hall, after: nil, includeUserID: true, includeState: false).total == 0)
        #expect(recorder.takeSent().isEmpty)
    }

    @Test func whoNowPagesInByteOrderAndWhereNowHidesQuietChannelsFromOthers() {
        let recorder = PresenceRecorder()
        let registry = recorder.make { $0.pageSize = 10; $0.intervalThreshold = 1_000 }
        let sessions = (0..<25).map { PresenceTestSession("user\($0)") }
        for session in sessions { join(registry, session) }
        let quiet = PresenceTestSession("hidden")
        join(registry, quiet, quiet: true)
        join(registry, quiet, ChannelKey(name: "open", type: .stream))
        var listed: [String] = []
        var after: String?
        var pages = 0
        repeat {
            let page = registry.whoNow(hall, after: after, includeUserID: true, includeState: true)
            #expect(page.total == 25)
            listed += page.users.map(\.userId)
            after = page.last
            pages += 1
        } while after != nil && pages < 10
        #expect(pages == 3)
        #expect(listed == sessions.map(\.user).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        #expect(registry.whoNow(hall, after: nil, includeUserID: false, includeState: false).users.isEmpty)

        #expect(registry.whereNow("hidden", asSelf: true).map(\.name) == ["hall", "open"])
        #expect(registry.whereNow("hidden", asSelf: false).map(\.name) == ["open"])
        #expect(throws: SwitchboardStoreError.self) { _ = try registry.state(of: "hidden", in: hall, asSeenBy: "user1") }
        #expect((try? registry.state(of: "hidden", in: hall, asSeenBy: "hidden")) != nil)
    }

    @Test func aboveTheThresholdChangesAreBatchedIntoIntervalEvents() {
        let recorder = PresenceRecorder()
        let registry = recorder.make { $0.intervalThreshold = 3 }
        let sessions = (0..<5).map { PresenceTestSession("u\($0)") }
        for session in sessions { join(registry, session) }
        // Three single joins; the fourth member crosses the threshold and starts interval mode.
        #expect(recorder.takeSent().count == 3)
        #expect(recorder.timers.withLock { $0.count } == 1)
        recorder.fireTimers()
        let interval = recorder.takeSent()
        #expect(interval.count == 1)
        #expect(interval[0].events[0].eventType == .interval)
        #expect(interval[0].events[0].joined == ["u3", "u4"])
        #expect(interval[0].aboutUser == nil)
        // Back at the threshold: the next interval finds nothing changed and leaves interval mode.
        for session in sessions.suffix(2) {
            try? registry.unsubscribe(session.id, userID: session.user, from: hall, now: 5_000) {}
        }
        #expect(recorder.takeSent().isEmpty)
        recorder.fireTimers()
        let net = recorder.takeSent()
        #expect(net.count == 1)
        #expect(net[0].events[0].left == ["u3", "u4"])
        recorder.fireTimers()
        #expect(recorder.timers.withLock { $0.isEmpty })
        try? registry.unsubscribe(sessions[0].id, userID: "u0", from: hall, now: 5_000) {}
        #expect(recorder.takeSent().map { $0.events[0].eventType } == [.remoteLeave])
    }

    @Test func aDroppedMemberTimesOutUnlessTheyComeBack() {
        let recorder = PresenceRecorder()
        let registry = recorder.make()
        let ann = PresenceTestSession("ann")
        let bob = PresenceTestSession("bob")
        join(registry, ann)
        join(registry, bob)
        _ = recorder.takeSent()
        var released: [ChannelKey] = []
        registry.leaveAll(bob.id, userID: "bob", exit: .timedOut) { released.append($0) }
        #expect(released == [hall])
        #expect(recorder.takeSent().isEmpty)
        #expect(registry.whoNow(hall, after: nil, includeUserID: true, includeState: false).total == 2)
        // Back within the timeout on a new session: nothing happens, and the old timer finds nothing to do.
        let bobAgain = PresenceTestSession("bob")
        join(registry, bobAgain)
        recorder.fireTimers()
        #expect(recorder.takeSent().isEmpty)
        registry.leaveAll(bobAgain.id, userID: "bob", exit: .timedOut) { _ in }
        recorder.fireTimers()
        let sent = recorder.takeSent()
        #expect(sent.map { $0.events[0].eventType } == [.remoteTimeout])
        #expect(sent[0].aboutUser == "bob")
        #expect(registry.whoNow(hall, after: nil, includeUserID: true, includeState: false).total == 1)
        #expect(registry.whereNow("bob", asSelf: true).isEmpty)
    }
}

/// Sessions another node of a cluster holds, as the cluster's mirror hands them to the registry.
@Suite struct PresenceRemoteSessionTests {
    @Test func aRemoteSessionJoinsWithItsStateOnceAndLeavesAtOnce() throws {
        let recorder = PresenceRecorder()
        let registry = recorder.make()
        let remote = PresenceTestSession("Tony")
        registry.attachRemote(remote.id, userID: "Tony", to: hall, quiet: false, state: [StateItem(key: "k", value: "v")], now: 5_000)
        registry.attachRemote(remote.id, userID: "Tony", to: hall, quiet: false, state: [], now: 5_000)  // applied twice
        let joins = recorder.takeSent()
        #expect(joins.count == 1)
        #expect(joins.first?.events.first?.eventType == .remoteJoin)
        #expect(joins.first?.events.first?.states == [StateItem(key: "k", value: "v")])
        #expect(registry.whoNow(hall, after: nil, includeUserID: true, includeState: true).users
            == [UserState(userId: "Tony", states: [StateItem(key: "k", value: "v")])])
        #expect(registry.whereNow("Tony", asSelf: false) == [hall])

        registry.replaceState(of: "Tony", in: hall, with: [StateItem(key: "k", value: "w")], now: 5_000)
        registry.replaceState(of: "Tony", in: hall, with: [StateItem(key: "k", value: "w")], now: 5_000)  // no change
        #expect(recorder.takeSent().map { $0.events.first?.eventType } == [.remoteStateChanged])

        registry.detachRemote(remote.id, userID: "Tony", from: hall, exit: .left, delayNanos: nil, now: 5_000)
        registry.detachRemote(remote.id, userID: "Tony", from: hall, exit: .left, delayNanos: nil, now: 5_000)
        #expect(recorder.takeSent().map { $0.events.first?.eventType } == [.remoteLeave])
        #expect(registry.whoNow(hall, after: nil, includeUserID: true, includeState: false).total == 0)
        #expect(registry.whereNow("Tony", asSelf: true).isEmpty)
    }

    @Test func aUserWithALocalAndARemoteSessionIsOneMember() throws {
        let recorder = PresenceRecorder()
        let registry = recorder.make()
        let local = PresenceTestSession("Tony")
        let remote = PresenceTestSession("Tony")
        join(registry, local)
        registry.attachRemote(remote.id, userID: "Tony", to: hall, quiet: false, state: [], now: 5_000)
        #expect(recorder.takeSent().map { $0.events.first?.eventType } == [.remoteJoin])
        registry.detachRemote(remote.id, userID: "Tony", from: hall, exit: .timedOut, delayNanos: 0, now: 5_000)
        #expect(recorder.takeSent().isEmpty)
        #expect(registry.whoNow(hall, after: nil, includeUserID: true, includeState: false).total == 1)
    }

    @Test func aRemoteSessionThatEndedTimesOutAfterTheGivenDelayUnlessTheUserComesBack() throws {
        let recorder = PresenceRecorder()
        let registry = recorder.make()
        let remote = PresenceTestSession("Tony")
        registry.attachRemote(remote.id, userID: "Tony", to: hall, quiet: false, state: [], now: 5_000)
        _ = recorder.takeSent()
        registry.detachRemote(remote.id, userID: "Tony", from: hall, exit: .timedOut, delayNanos: 1_000, now: 5_000)
        #expect(recorder.takeSent().isEmpty)
        #expect(registry.whoNow(hall, after: nil, includeUserID: true, includeState: false).total == 1)
        recorder.fireTimers()
        #expect(recorder.takeSent().map { $0.events.first?.eventType } == [.remoteTimeout])

        // Came back (on any node) before the timer: nothing at all.
        registry.attachRemote(remote.id, userID: "Tony", to: hall, quiet: false, state: [], now: 5_000)
        _ = recorder.takeSent()
        registry.detachRemote(remote.id, userID: "Tony", from: hall, exit: .timedOut, delayNanos: 1_000, now: 5_000)
        let back = PresenceTestSession("Tony")
        join(registry, back)
        recorder.fireTimers()
        #expect(recorder.takeSent().isEmpty)

        // A delay of zero (the node was seen dead after the presence timeout): at once.
        let other = PresenceTestSession("Ana")
        registry.attachRemote(other.id, userID: "Ana", to: hall, quiet: false, state: [], now: 5_000)
        _ = recorder.takeSent()
        registry.detachRemote(other.id, userID: "Ana", from: hall, exit: .timedOut, delayNanos: 0, now: 5_000)
        let sent = recorder.takeSent()
        #expect(sent.map { $0.events.first?.eventType } == [.remoteTimeout] && sent.first?.aboutUser == "Ana")
    }
}
