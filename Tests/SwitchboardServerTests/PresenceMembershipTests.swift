import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardStore
import SwitchboardWire
import Synchronization
import Testing

// MARK: - fixtures shared by the presence suites

extension PresenceConfiguration {
    /// Short times so the suites finish quickly.
    static func testing(
        timeout: TimeAmount = .milliseconds(300), interval: TimeAmount = .milliseconds(100), threshold: Int = 50
    ) -> PresenceConfiguration {
        var configuration = PresenceConfiguration()
        configuration.presenceTimeout = timeout
        configuration.interval = interval
        configuration.intervalThreshold = threshold
        return configuration
    }
}

/// A gateway serving presence, and the area behind it.
struct PresenceFixture: Sendable {
    var gateway: RunningGateway
    var area: PresenceArea
    var transport: Transport

    func connect(_ user: String, device: String = "") async throws -> PresenceClient {
        PresenceClient(user: user, connection: try await self.gateway.connect(self.transport, user: user, device: device))
    }
}

/// Records every `ChannelMembershipObserver` call.
final class PresenceMembershipRecorder: ChannelMembershipObserver {
    private let calls = Mutex<[(user: String, channel: ChannelKey, options: SwitchboardServer.ChannelOptions)]>([])

    func memberJoined(_ session: SessionHandle, channel: ChannelKey, options: SwitchboardServer.ChannelOptions) {
        self.calls.withLock { $0.append((session.info.userID, channel, options)) }
    }

    var recorded: [(user: String, channel: ChannelKey, options: SwitchboardServer.ChannelOptions)] { self.calls.withLock { $0 } }
}

/// Runs `body` against a gateway with a fresh presence area.
func withPresence<T: Sendable>(
    _ configuration: PresenceConfiguration = .testing(),
    transport: Transport = .tcp,
    server: (inout ServerConfiguration) -> Void = { _ in },
    membershipObservers: [any ChannelMembershipObserver] = [],
    nowMillis: (@Sendable () -> Int64)? = nil,
    _ body: @Sendable (PresenceFixture) async throws -> T
) async throws -> T {
    try await withGateway(
        server,
        application: { application in
            application.areas = [.presence]
            application.presence = configuration
        }, membershipObservers: membershipObservers, nowMillis: nowMillis
    ) { gateway in
        let area = try #require(gateway.services?.presence)
        return try await body(PresenceFixture(gateway: gateway, area: area, transport: transport))
    }
}

/// A client connection with helpers for the presence operations and a buffer of the presence events it received.
final class PresenceClient: Sendable {
    let user: String
    let connection: SwitchboardConnection
    private let inbox = Mutex<(events: [PresenceEvent], taken: Int)>(([], 0))

    init(user: String, connection: SwitchboardConnection) {
        self.user = user
        self.connection = connection
        Task { [weak self, pushes = connection.pushes] in
            for await push in pushes {
                guard case .presenceEvent(let event) = push else { continue }
                guard let self else { return }
                self.inbox.withLock { $0.events.append(event) }
            }
        }
    }

    func subscribe(
        _ channel: String, type: ChannelType = .message, presence: Bool = true, quiet: Bool = false
    ) async throws {
        _ = try await self.connection.send(
            .subscribeChannel(
                SubscribeChannelRequest(channel: channel, channelType: type, withPresence: presence, beQuiet: quiet)))
    }

    func unsubscribe(_ channel: String, type: ChannelType = .message) async throws {
        _ = try await self.connection.send(.unsubscribeChannel(UnsubscribeChannelRequest(channel: channel, channelType: type)))
    }

    func whoNow(
        _ channel: String, type: ChannelType = .message, userIDs: Bool = true, states: Bool = false, page: String = ""
    ) async throws -> WhoNowResponse {
        let response = try await self.connection.send(
            .whoNow(WhoNowRequest(channel: channel, channelType: type, includeUserId: userIDs, includeState: states, page: page)))
        guard case .whoNow(let body) = response else { throw UnexpectedPresenceResponse(response: response) }
        return body
    }

    /// Every user id of the channel, walking all pages.
    func allMembers(_ channel: String, type: ChannelType = .message) async throws -> [String] {
        var users: [String] = []
        var page = ""
        repeat {
            let response = try await self.whoNow(channel, type: type, page: page)
            users += response.users.map(\.userId)
            page = response.nextPage
        } while !page.isEmpty
        return users
    }

    func whereNow(_ user: String = "") async throws -> WhereNowResponse {
        let response = try await self.connection.send(.whereNow(WhereNowRequest(userId: user)))
        guard case .whereNow(let body) = response else { throw UnexpectedPresenceResponse(response: response) }
        return body
    }

    func setState(_ channel: String, type: ChannelType = .message, _ pairs: KeyValuePairs<String, String>) async throws {
        try await self.setState(channel, type: type, items: pairs.map { StateItem(key: $0.key, value: $0.value) })
    }

    func setState(_ channel: String, type: ChannelType = .message, items: [StateItem]) async throws {
        _ = try await self.connection.send(.setState(SetStateRequest(channel: channel, channelType: type, items: items)))
    }

    func getState(_ channel: String, type: ChannelType = .message, of user: String = "") async throws -> [String: String] {
        let response = try await self.connection.send(.getState(GetStateRequest(channel: channel, channelType: type, userId: user)))
        guard case .getState(let body) = response else { throw UnexpectedPresenceResponse(response: response) }
        return Dictionary(body.items.map { ($0.key, $0.value) }, uniquingKeysWith: { $1 })
    }

    func removeState(_ channel: String, type: ChannelType = .message, keys: [String] = []) async throws {
        _ = try await self.connection.send(.removeState(RemoveStateRequest(channel: channel, channelType: type, keys: keys)))
    }

    /// The next `count` events not taken yet, waiting up to `timeout` for them (fewer if they do not come).
    func events(_ count: Int, timeout: Duration = .seconds(5)) async -> [PresenceEvent] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let taken: [PresenceEvent]? = self.inbox.withLock { inbox in
                guard inbox.events.count - inbox.taken >= count || ContinuousClock.now >= deadline else { return nil }
                let end = min(inbox.events.count, inbox.taken + count)
                let result = Array(inbox.events[inbox.taken..<end])
                inbox.taken = end
                return result
            }
            if let taken { return taken }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    /// The next event, or nil if none comes within `timeout`.
    func nextEvent(timeout: Duration = .seconds(5)) async -> PresenceEvent? {
        await self.events(1, timeout: timeout).first
    }

    /// Takes events until `done` says the ones taken so far are enough, or `timeout` passes.
    func events(timeout: Duration = .seconds(5), until done: ([PresenceEvent]) -> Bool) async -> [PresenceEvent] {
        let deadline = ContinuousClock.now + timeout
        var taken: [PresenceEvent] = []
        while !done(taken) {
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero, let event = await self.nextEvent(timeout: remaining) else { break }
            taken.append(event)
        }
        return taken
    }

    /// Events that arrive within `window` (a test that expects silence checks this is empty).
    func eventsDuring(_ window: Duration) async -> [PresenceEvent] {
        try? await Task.sleep(for: window)
        return self.pending()
    }

    /// Takes every event received and not yet taken.
    func pending() -> [PresenceEvent] {
        self.inbox.withLock { inbox in
            let result = Array(inbox.events[inbox.taken...])
            inbox.taken = inbox.events.count
            return result
        }
    }
}

struct UnexpectedPresenceResponse: Error {
    var response: Response
}

/// The error code a request failed with, or nil if it succeeded.
func presenceError(_ body: () async throws -> Void) async -> ErrorCode? {
    do {
        try await body()
        return nil
    } catch let error as SwitchboardClientError {
        return error.code
    } catch {
        return .internal
    }
}

/// Waits until `condition` holds, polling, at most `timeout`.
func presenceEventually(timeout: Duration = .seconds(5), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return try await condition()
}

extension PresenceEvent {
    var snapshotUsers: [String] { self.snapshot.map(\.userId) }
    var stateDictionary: [String: String] { Dictionary(self.states.map { ($0.key, $0.value) }, uniquingKeysWith: { $1 }) }
}

// MARK: - membership and events

@Suite struct PresenceMembershipTests {
    @Test func subscribingSendsASnapshotOfEveryMemberWithTheirState() async throws {
        try await withPresence { fixture in
            let alice = try await fixture.connect("alice")
            try await alice.subscribe("lobby")
            let first = try #require(await alice.nextEvent())
            #expect(first.eventType == .snapshot && first.snapshotUsers == ["alice"] && first.totalOccupancy == 1)
            try await alice.setState("lobby", ["mood": "busy"])

            let bob = try await fixture.connect("bob")
            try await bob.subscribe("lobby")
            let snapshot = try #require(await bob.nextEvent())
            #expect(snapshot.eventType == .snapshot)
            #expect(snapshot.channel == "lobby" && snapshot.channelType == .message)
            #expect(snapshot.snapshotUsers == ["alice", "bob"])
            #expect(snapshot.snapshot.first?.states == [StateItem(key: "mood", value: "busy")])
            #expect(snapshot.totalOccupancy == 2)
            // Without presence events there is no snapshot.
            let carol = try await fixture.connect("carol")
            try await carol.subscribe("lobby", presence: false)
            #expect(await carol.eventsDuring(.milliseconds(150)).isEmpty)
        }
    }

    @Test(arguments: Transport.allCases)
    func joinStateAndLeaveEventsArriveInOrder(transport: Transport) async throws {
        try await withPresence(transport: transport) { fixture in
            let alice = try await fixture.connect("alice")
            try await alice.subscribe("lobby")
            _ = await alice.nextEvent()  // snapshot
            let bob = try await fixture.connect("bob")
            try await bob.subscribe("lobby")
            try await bob.setState("lobby", ["mood": "happy", "game": "chess"])
            try await bob.setState("lobby", ["mood": "sad"])
            try await bob.removeState("lobby", keys: ["game"])
            try await bob.unsubscribe("lobby")

            let events = await alice.events(5)
            #expect(events.map(\.eventType) == [.remoteJoin, .remoteStateChanged, .remoteStateChanged, .remoteStateChanged, .remoteLeave])
            #expect(events.allSatisfy { $0.publisher == "bob" && $0.channel == "lobby" })
            #expect(events.map(\.totalOccupancy) == [2, 2, 2, 2, 1])
            guard events.count == 5 else { return }
            #expect(events[1].stateDictionary == ["mood": "happy", "game": "chess"])
            #expect(events[2].stateDictionary == ["mood": "sad", "game": "chess"])
            #expect(events[3].stateDictionary == ["mood": "sad"])
            // Bob sees no events about himself.
            let bobsEvents = await bob.eventsDuring(.milliseconds(50))
            #expect(bobsEvents.map(\.eventType) == [.snapshot])
        }
    }

    @Test func aUserOnTwoDevicesIsOneMemberUntilTheLastSessionLeaves() async throws {
        try await withPresence { fixture in
            let alice = try await fixture.connect("alice")
            try await alice.subscribe("lobby")
            _ = await alice.nextEvent()
            let phone = try await fixture.connect("bob", device: "phone")
            let laptop = try await fixture.connect("bob", device: "laptop")
            try await phone.subscribe("lobby")
            try await laptop.subscribe("lobby")
            let join = await alice.events(1)
            #expect(join.map(\.eventType) == [.remoteJoin])
            #expect(try await alice.whoNow("lobby").totalOccupancy == 2)

            try await laptop.unsubscribe("lobby")
            #expect(await alice.eventsDuring(.milliseconds(300)).isEmpty)
            #expect(try await alice.allMembers("lobby") == ["alice", "bob"])

            try await phone.connection.logout()
            let leave = try #require(await alice.nextEvent())
            #expect(leave.eventType == .remoteLeave && leave.publisher == "bob" && leave.totalOccupancy == 1)
            #expect(try await alice.allMembers("lobby") == ["alice"])
        }
    }

    /// SB-13.3-10: unsubscribe and logout take effect at once (member and state gone before the response, the leave
    /// sent at once); only a dropped connection waits, for the presence timeout (SB-13.3-9). Runs with the default
    /// configuration but a shorter presence timeout, so a leave debounce would show.
    @Test(arguments: Transport.allCases)
    func anExplicitLeaveTakesEffectAtOnceAndOnlyADropWaits(transport: Transport) async throws {
        var configuration = PresenceConfiguration()
        configuration.presenceTimeout = .seconds(2)
        try await withPresence(configuration, transport: transport) { fixture in
            let alice = try await fixture.connect("alice")
            try await alice.subscribe("lobby")
            _ = await alice.nextEvent()  // snapshot
            let bob = try await fixture.connect("bob")
            try await bob.subscribe("lobby")
            try await bob.setState("lobby", ["mood": "ok"])
            #expect(await alice.events(2).map(\.eventType) == [.remoteJoin, .remoteStateChanged])

            // Unsubscribe: gone for every query answered after the response, and the leave comes at once.
            let unsubscribed = ContinuousClock.now
            try await bob.unsubscribe("lobby")
            #expect(try await alice.allMembers("lobby") == ["alice"])
            #expect(try await alice.whoNow("lobby", userIDs: false).totalOccupancy == 1)
            #expect(await presenceError { _ = try await alice.getState("lobby", of: "bob") } == .userNotPresent)
            #expect(try await alice.whereNow("bob").totalChannel == 0)
            // The leave was sent to alice before the answers to her queries above, on the same connection: it is
            // already here (a debounced leave would come 2 s after the unsubscribe, long after these answers).
            let leave = try #require(await alice.nextEvent(timeout: .seconds(1)), "no leave \(ContinuousClock.now - unsubscribed) after the unsubscribe")
            #expect(leave.eventType == .remoteLeave && leave.publisher == "bob" && leave.totalOccupancy == 1)

            // Subscribing again is a new membership: a join, with the state cleared.
            try await bob.subscribe("lobby")
            let join = try #require(await alice.nextEvent())
            #expect(join.eventType == .remoteJoin && join.publisher == "bob" && join.states.isEmpty)
            #expect(try await bob.getState("lobby") == [:])

            // Logout: the same, before the logout response.
            try await bob.setState("lobby", ["mood": "ok"])
            #expect(await alice.nextEvent()?.eventType == .remoteStateChanged)
            let loggedOut = ContinuousClock.now
            try await bob.connection.logout()
            #expect(try await alice.allMembers("lobby") == ["alice"])
            #expect(await presenceError { _ = try await alice.getState("lobby", of: "bob") } == .userNotPresent)
            let logoutLeave = try #require(await alice.nextEvent(timeout: .seconds(1)), "no leave \(ContinuousClock.now - loggedOut) after the logout")
            #expect(logoutLeave.eventType == .remoteLeave && logoutLeave.publisher == "bob")

            // A dropped connection still waits: member and state kept for the presence timeout, then remoteTimeout.
            let carol = try await fixture.connect("carol")
            try await carol.subscribe("lobby")
            try await carol.setState("lobby", ["mood": "away"])
            #expect(await alice.events(2).map(\.eventType) == [.remoteJoin, .remoteStateChanged])
            let dropped = ContinuousClock.now
            await carol.close()
            let lobby = ChannelKey(name: "lobby", type: .message)
            #expect(await presenceEventually { fixture.area.subscriptions.members(of: lobby).count == 1 })
            #expect(try await alice.allMembers("lobby") == ["alice", "carol"])
            #expect(try await alice.getState("lobby", of: "carol") == ["mood": "away"])
            let timeout = try #require(await alice.nextEvent())
            #expect(timeout.eventType == .remoteTimeout && timeout.publisher == "carol")
            #expect(ContinuousClock.now - dropped >= .milliseconds(1900))
        }
    }

    @Test func aSessionKilledWithoutLogoutTimesOutAfterThePresenceTimeout() async throws {
        try await withPresence(.testing(timeout: .seconds(2))) { fixture in
            let alice = try await fixture.connect("alice")
            try await alice.subscribe("lobby")
            _ = await alice.nextEvent()
            let bob = try await fixture.connect("bob")
            try await bob.subscribe("lobby")
            try await bob.setState("lobby", ["mood": "ok"])
            _ = await alice.events(2)

            let closed = ContinuousClock.now
            await bob.close()
            let lobby = ChannelKey(name: "lobby", type: .message)
            #expect(await presenceEventually { fixture.area.subscriptions.members(of: lobby).count == 1 })
            // The session is gone, but the user is still a member, state kept, during the timeout.
            #expect(try await alice.allMembers("lobby") == ["alice", "bob"])
            #expect(try await alice.getState("lobby", of: "bob") == ["mood": "ok"])
            #expect(try await alice.whereNow("bob").totalChannel == 1)

            let timeout = try #require(await alice.nextEvent())
            #expect(ContinuousClock.now - closed >= .milliseconds(1900))
            #expect(timeout.eventType == .remoteTimeout && timeout.publisher == "bob" && timeout.totalOccupancy == 1)
            #expect(try await alice.allMembers("lobby") == ["alice"])
            #expect(await presenceError { _ = try await alice.getState("lobby", of: "bob") } == .userNotPresent)
            #expect(try await alice.whereNow("bob").totalChannel == 0)
        }
    }

    @Test func aUserWhoReconnectsAndResubscribesWithinThePresenceTimeoutCausesNoEvents() async throws {
        try await withPresence(.testing(timeout: .seconds(3))) { fixture in
            let alice = try await fixture.connect("alice")
            try await alice.subscribe("lobby")
            _ = await alice.nextEvent()
            let bob = try await fixture.connect("bob")
            try await bob.subscribe("lobby")
            try await bob.setState("lobby", ["mood": "ok"])
            _ = await alice.events(2)

            await bob.close()
            let back = try await fixture.connect("bob")
            try await back.subscribe("lobby")
            let snapshot = try #require(await back.nextEvent())
            #expect(snapshot.eventType == .snapshot && snapshot.snapshotUsers == ["alice", "bob"])
            #expect(try await back.getState("lobby") == ["mood": "ok"])
            #expect(await alice.eventsDuring(.milliseconds(3300)).isEmpty)
        }
    }

    @Test func aUserIsInAtMostFiftyChannels() async throws {
        try await withPresence { fixture in
            let phone = try await fixture.connect("bob", device: "phone")
            for index in 0..<25 {
                try await phone.subscribe("room-\(index)", presence: false)
                try await phone.subscribe("room-\(index)", type: .stream, presence: false)
            }
            #expect(await presenceError { try await phone.subscribe("one-too-many") } == .tooManyChannels)
            // The limit is per user, across devices; a channel the user is already in is fine.
            let laptop = try await fixture.connect("bob", device: "laptop")
            #expect(await presenceError { try await laptop.subscribe("one-too-many") } == .tooManyChannels)
            try await laptop.subscribe("room-3", presence: false)
            try await phone.subscribe("room-3", presence: false, quiet: true)
            #expect(try await phone.whereNow().totalChannel == 50)

            try await phone.unsubscribe("room-7", type: .stream)
            try await phone.subscribe("one-too-many", presence: false)
        }
    }

    @Test func subscriptionsCountAgainstTheConnectionLimit() async throws {
        try await withPresence(server: { $0.limits.maxSubscriptionsPerConnection = 2 }) { fixture in
            let bob = try await fixture.connect("bob")
            try await bob.subscribe("a", presence: false)
            try await bob.subscribe("b", presence: false)
            try await bob.subscribe("b", presence: false)  // a second subscribe replaces options: no new subscription
            #expect(await presenceError { try await bob.subscribe("c") } == .tooManySubscriptions)
            try await bob.unsubscribe("a")
            try await bob.subscribe("c", presence: false)
            #expect(await presenceError { try await bob.unsubscribe("a") } == .notSubscribed)
        }
    }

    @Test func quietMembersAreInvisibleToOthersButStillHearThem() async throws {
        try await withPresence { fixture in
            let alice = try await fixture.connect("alice")
            try await alice.subscribe("lobby")
            _ = await alice.nextEvent()
            let carol = try await fixture.connect("carol")
            try await carol.subscribe("lobby", quiet: true)
            try await carol.setState("lobby", ["hidden": "yes"])
            let carolsSnapshot = try #require(await carol.nextEvent())
            #expect(carolsSnapshot.snapshotUsers == ["alice"])

            let bob = try await fixture.connect("bob")
            try await bob.subscribe("lobby")
            let bobsSnapshot = try #require(await bob.nextEvent())
            #expect(bobsSnapshot.snapshotUsers == ["alice", "bob"] && bobsSnapshot.totalOccupancy == 2)
            #expect(await carol.nextEvent()?.eventType == .remoteJoin)

            // Alice heard only of Bob.
            #expect(await alice.events(1).map(\.publisher) == ["bob"])
            try await carol.unsubscribe("lobby")
            #expect(try await presenceEventually { try await carol.whereNow().totalChannel == 0 })
            #expect(await alice.eventsDuring(.milliseconds(100)).isEmpty)

            try await carol.subscribe("lobby", quiet: true)
            #expect(try await alice.whoNow("lobby").totalOccupancy == 2)
            #expect(try await alice.allMembers("lobby") == ["alice", "bob"])
            #expect(await presenceError { _ = try await alice.getState("lobby", of: "carol") } == .userNotPresent)
            #expect(try await carol.getState("lobby") == [:])
            #expect(try await alice.whereNow("carol").totalChannel == 0)
            #expect(try await carol.whereNow().channels == [ChannelRef(channel: "lobby", channelType: .message)])

            // A second, visible session makes Carol visible: that is her join.
            let carolsLaptop = try await fixture.connect("carol", device: "laptop")
            try await carolsLaptop.subscribe("lobby")
            let join = try #require(await alice.nextEvent())
            #expect(join.eventType == .remoteJoin && join.publisher == "carol" && join.totalOccupancy == 3)
        }
    }

    @Test func membershipObserversAreToldAfterEveryJoin() async throws {
        let recorder = PresenceMembershipRecorder()
        try await withPresence(membershipObservers: [recorder]) { fixture in
            let bob = try await fixture.connect("bob")
            try await bob.subscribe("lobby", type: .stream, presence: false)
            _ = try await bob.connection.send(
                .subscribeChannel(SubscribeChannelRequest(channel: "lobby", channelType: .stream, withMetadata: true, withLock: true)))
            #expect(await presenceError { try await bob.subscribe("") } == .invalidArgument)
            #expect(await presenceError { try await bob.subscribe(String(repeating: "x", count: 65)) } == .identifierTooLong)
        }
        let calls = recorder.recorded
        #expect(calls.count == 2)
        #expect(calls.allSatisfy { $0.user == "bob" && $0.channel == ChannelKey(name: "lobby", type: .stream) })
        #expect(calls.last?.options == SwitchboardServer.ChannelOptions(withMetadata: true, withPresence: true, withLock: true, beQuiet: false))
    }
}

extension PresenceClient {
    /// Closes the connection without logging out (an abnormal end).
    func close() async {
        await self.connection.close()
    }
}

@Suite struct PresenceSnapshotCapTests {
    /// SB-13.3-12: the parts of a split snapshot carry `more` except the last; an unsplit snapshot carries none.
    @Test func aSplitSnapshotMarksEveryPartButTheLast() async throws {
        var configuration = PresenceConfiguration.testing()
        configuration.maxUsersPerPush = 2
        try await withPresence(configuration) { fixture in
            var members: [PresenceClient] = []
            for user in ["u1", "u2", "u3", "u4"] {
                let member = try await fixture.connect(user)
                try await member.subscribe("big", presence: false)
                members.append(member)
            }
            let watcher = try await fixture.connect("u5")
            try await watcher.subscribe("big")
            let parts = await watcher.events(3)
            #expect(parts.map(\.eventType) == [.snapshot, .snapshot, .snapshot])
            #expect(parts.map(\.more) == [true, true, false])
            #expect(parts.flatMap(\.snapshotUsers) == ["u1", "u2", "u3", "u4", "u5"])
            #expect(parts.allSatisfy { $0.totalOccupancy == 5 })
            #expect(await watcher.eventsDuring(.milliseconds(100)).isEmpty)

            let solo = try await fixture.connect("solo")
            try await solo.subscribe("small")
            let single = try #require(await solo.nextEvent())
            #expect(single.eventType == .snapshot && single.snapshotUsers == ["solo"] && !single.more)
        }
    }

    /// SB-13.3-11: subscribing again is not an error; it replaces the options and sends the snapshot again.
    @Test func subscribingAgainReplacesTheOptionsAndSendsTheSnapshotAgain() async throws {
        try await withPresence { fixture in
            let alice = try await fixture.connect("alice")
            try await alice.subscribe("lobby")
            _ = await alice.nextEvent()
            let bob = try await fixture.connect("bob")
            try await bob.subscribe("lobby", presence: false)
            try await bob.setState("lobby", ["mood": "ok"])
            #expect(await alice.events(2).map(\.eventType) == [.remoteJoin, .remoteStateChanged])
            // Now with presence events: a snapshot, and nothing for the others (membership and state continue).
            try await bob.subscribe("lobby")
            let snapshot = try #require(await bob.nextEvent())
            #expect(snapshot.eventType == .snapshot && snapshot.snapshotUsers == ["alice", "bob"])
            #expect(try await bob.getState("lobby") == ["mood": "ok"])
            // Quiet now: the others see a leave; visible again: a join.
            try await bob.subscribe("lobby", presence: false, quiet: true)
            #expect(await alice.nextEvent()?.eventType == .remoteLeave)
            try await bob.subscribe("lobby", presence: false)
            #expect(await alice.nextEvent()?.eventType == .remoteJoin)
            #expect(await bob.eventsDuring(.milliseconds(100)).isEmpty)
        }
    }

    @Test func snapshotsListAtMostTheCapAndCountEveryone() async throws {
        var configuration = PresenceConfiguration.testing()
        configuration.maxSnapshotUsers = 2
        try await withPresence(configuration) { fixture in
            var clients: [PresenceClient] = []
            for user in ["dave", "carol", "bob", "alice"] {
                let client = try await fixture.connect(user)
                try await client.subscribe("big")
                clients.append(client)
            }
            let alice = clients[3]
            let snapshot = try #require(await alice.nextEvent())
            #expect(snapshot.eventType == .snapshot)
            #expect(snapshot.snapshotUsers == ["alice", "bob"])  // the first two in byte order
            #expect(snapshot.totalOccupancy == 4)
        }
    }
}
