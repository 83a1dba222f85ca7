import Foundation
import SwitchboardClient
import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// Presence across the nodes of a cluster sharing one PostgreSQL database, over real sockets: `whoNow`, `whereNow`,
/// `getState` and presence events see the members of every node.
@Suite("Cluster presence", .serialized, .timeLimit(.minutes(3)))
struct ClusterPresenceTests {
    @Test("members joined on three nodes are listed by whoNow (with ids, states, occupancy) and whereNow on every node", arguments: PresenceEngine.allCases)
    func membersOfEveryNodeAreListedOnEveryNode(engine: PresenceEngine) async throws {
        try await engine.withCluster(nodes: 3) { _, nodes in
            var members: [SwitchboardClient] = []
            for index in 0..<6 {
                let client = try await nodes[index % 3].client("u\(index)")
                try await client.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
                try await client.setState(channel: "room", items: [StateItem(key: "seat", value: "s\(index)")])
                members.append(client)
            }
            try await members[4].subscribeChannel(channel: "side", type: .stream, options: ChannelSubscriptionOptions(withPresence: false))
            let expected = (0..<6).map { UserState(userId: "u\($0)", states: [StateItem(key: "seat", value: "s\($0)")]) }
            for node in nodes {
                let reader = try await node.client("Reader")
                let listed = try await eventually {
                    let page = try await reader.whoNow(channel: "room", includeState: true)
                    return page.totalOccupancy == 6 && page.users == expected && page.nextPage.isEmpty
                }
                #expect(listed, "node \(node.port) does not list every member with its state")
                let count = try await reader.whoNow(channel: "room", includeUserIDs: false)
                #expect(count.totalOccupancy == 6 && count.users.isEmpty)
                let ids = try await reader.whoNow(channel: "room")
                #expect(ids.users.map(\.userId) == expected.map(\.userId) && ids.users.allSatisfy(\.states.isEmpty))
                let located = try await eventually {
                    let channels = try await reader.whereNow(userID: "u4")
                    return channels.totalChannel == 2
                        && channels.channels == [
                            ChannelRef(channel: "room", channelType: .message), ChannelRef(channel: "side", channelType: .stream),
                        ]
                }
                #expect(located, "node \(node.port) does not know where u4 is")
                let state = try await reader.getState(channel: "room", userID: "u2")
                #expect(state.userId == "u2" && state.items == [StateItem(key: "seat", value: "s2")])
                await reader.close()
            }
            for client in members { await client.close() }
        }
    }

    @Test("paged whoNow over 150 members spread over three nodes returns each exactly once, on every node, while others come and go", arguments: PresenceEngine.allCases)
    func pagedWhoNowAcrossNodesListsEachMemberOnce(engine: PresenceEngine) async throws {
        try await engine.withCluster(nodes: 3) { _, nodes in
            let count = 150
            let members = try await withThrowingTaskGroup(of: SwitchboardClient.self) { group in
                for index in 0..<count {
                    group.addTask {
                        let client = try await nodes[index % 3].client("m\(String(1_000 + index))")
                        try await client.subscribeChannel(
                            channel: "hall", options: ChannelSubscriptionOptions(withPresence: false))
                        return client
                    }
                }
                var clients: [SwitchboardClient] = []
                for try await client in group { clients.append(client) }
                return clients
            }
            let stayers = Set((0..<count).map { "m\(1_000 + $0)" })
            for (round, node) in nodes.enumerated() {
                let reader = try await node.client("Reader")
                let everyone = try await eventually(seconds: 10) {
                    try await reader.whoNow(channel: "hall", includeUserIDs: false).totalOccupancy == UInt64(count)
                }
                #expect(everyone)
                var seen: [String] = []
                var page = ""
                var pages = 0
                // Others join and leave between pages: the members who stay are each listed once.
                // (a name that sorts into the second page)
                let churn = try await nodes[(round + 1) % 3].client("m1120-churn\(round)")
                repeat {
                    let response = try await reader.whoNow(channel: "hall", page: page)
                    seen += response.users.map(\.userId)
                    page = response.nextPage
                    pages += 1
                    if pages == 1 {
                        try await churn.subscribeChannel(channel: "hall", options: ChannelSubscriptionOptions(withPresence: false))
                    } else if pages == 2 {
                        try await churn.unsubscribeChannel(channel: "hall")
                    }
                } while !page.isEmpty && pages < 10
                let listedStayers = seen.filter { stayers.contains($0) }
                #expect(listedStayers.count == count && Set(listedStayers) == stayers, "\(listedStayers.count) of \(count) listed")
                #expect(seen == seen.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
                #expect(pages >= 2)
                await churn.close()
                await reader.close()
            }
            for client in members { await client.close() }
        }
    }

    @Test("a whoNow bookmark issued by one node gives the next page on another", arguments: PresenceEngine.allCases)
    func aBookmarkOfOneNodeWorksOnAnother(engine: PresenceEngine) async throws {
        try await engine.withCluster(nodes: 2) { _, nodes in
            var members: [SwitchboardClient] = []
            for index in 0..<120 {
                let client = try await nodes[index % 2].client("b\(String(1_000 + index))")
                try await client.subscribeChannel(channel: "hall", options: ChannelSubscriptionOptions(withPresence: false))
                members.append(client)
            }
            let first = try await nodes[0].client("Reader")
            let second = try await nodes[1].client("Reader")
            let everyone = try await eventually {
                let onFirst = try await first.whoNow(channel: "hall", includeUserIDs: false).totalOccupancy
                let onSecond = try await second.whoNow(channel: "hall", includeUserIDs: false).totalOccupancy
                return onFirst == 120 && onSecond == 120
            }
            #expect(everyone)
            let page = try await first.whoNow(channel: "hall")
            #expect(page.users.count == 100 && !page.nextPage.isEmpty)
            let rest = try await second.whoNow(channel: "hall", page: page.nextPage)
            #expect(rest.nextPage.isEmpty)
            #expect((page.users + rest.users).map(\.userId) == (0..<120).map { "b\(1_000 + $0)" })
            for client in members + [first, second] { await client.close() }
        }
    }

    @Test("join, state and leave events of a member on one node reach a member on another in order", arguments: PresenceEngine.allCases)
    func eventsOfOneNodeReachMembersOfAnotherInOrder(engine: PresenceEngine) async throws {
        try await engine.withCluster(nodes: 3) { _, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let events = PresenceEventIterator(watcher.presenceEvents)
            try await watcher.subscribeChannel(channel: "room")
            let snapshot = try #require(await events.next(seconds: 5))
            #expect(snapshot.eventType == .snapshot && snapshot.snapshot.map(\.userId) == ["Watcher"])

            let tony = try await nodes[0].client("Tony")
            try await tony.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            try await tony.setState(channel: "room", items: [StateItem(key: "mood", value: "happy")])
            try await tony.setState(channel: "room", items: [StateItem(key: "mood", value: "busy")])
            try await tony.removeState(channel: "room")
            try await tony.unsubscribeChannel(channel: "room")

            var received: [PresenceEvent] = []
            for _ in 0..<5 {
                received.append(try #require(await events.next(seconds: 5), "after \(received.map(\.eventType))"))
            }
            #expect(received.map(\.eventType) == [.remoteJoin, .remoteStateChanged, .remoteStateChanged, .remoteStateChanged, .remoteLeave])
            #expect(received.allSatisfy { $0.publisher == "Tony" && $0.channel == "room" })
            #expect(received.map(\.totalOccupancy) == [2, 2, 2, 2, 1])
            #expect(received[1].states == [StateItem(key: "mood", value: "happy")])
            #expect(received[2].states == [StateItem(key: "mood", value: "busy")])
            #expect(received[3].states.isEmpty)
            await tony.close()
            await watcher.close()
        }
    }

    @Test("a channel with more members than the interval threshold, spread over nodes, sends interval events with the other nodes' changes", arguments: PresenceEngine.allCases)
    func intervalModeCountsTheMembersOfEveryNode(engine: PresenceEngine) async throws {
        try await engine.withCluster(nodes: 3) { _, nodes in
            let watcher = try await nodes[0].client("Watcher")
            let events = PresenceEventIterator(watcher.presenceEvents)
            try await watcher.subscribeChannel(channel: "crowd")
            _ = try #require(await events.next(seconds: 5))
            // 60 members on the other two nodes: more than the default threshold of 50.
            var members: [SwitchboardClient] = []
            for index in 0..<60 {
                let client = try await nodes[1 + index % 2].client("c\(String(1_000 + index))")
                try await client.subscribeChannel(channel: "crowd", options: ChannelSubscriptionOptions(withPresence: false))
                members.append(client)
            }
            var joined = Set<String>()
            var sawInterval = false
            while joined.count < 60, let event = await events.next(seconds: 10) {
                switch event.eventType {
                case .remoteJoin: joined.insert(event.publisher)
                case .interval:
                    sawInterval = true
                    joined.formUnion(event.joined)
                default: Issue.record("unexpected \(event.eventType)")
                }
            }
            #expect(joined == Set((0..<60).map { "c\(1_000 + $0)" }))
            #expect(sawInterval)
            try await members[7].unsubscribeChannel(channel: "crowd")
            let left = try #require(await events.next(seconds: 10))
            #expect(left.eventType == .interval && left.left == ["c1007"] && left.totalOccupancy == 60)
            for client in members + [watcher] { await client.close() }
        }
    }

    @Test("a quiet member on another node is neither listed nor announced, but whereNow shows the user their own channel")
    func aQuietMemberOfAnotherNodeStaysQuiet() async throws {
        try await withCluster(nodes: 2) { postgres, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let events = PresenceEventIterator(watcher.presenceEvents)
            try await watcher.subscribeChannel(channel: "room")
            _ = try #require(await events.next(seconds: 5))
            let shy = try await nodes[0].client("Shy")
            try await shy.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false, beQuiet: true))
            let written = try await eventually {
                try await postgres.psql("SELECT count(*) FROM sb_presence WHERE quiet") == "1"
            }
            #expect(written)
            let marker = try await nodes[0].client("Marker")
            try await marker.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let next = try #require(await events.next(seconds: 5))
            #expect(next.eventType == .remoteJoin && next.publisher == "Marker")
            #expect(try await watcher.whoNow(channel: "room").users.map(\.userId) == ["Marker", "Watcher"])
            #expect(try await watcher.whereNow(userID: "Shy").totalChannel == 0)
            // The user themself, on the watcher's node, sees the quiet channel.
            let shyElsewhere = try await nodes[1].client("Shy")
            #expect(try await shyElsewhere.whereNow().channels == [ChannelRef(channel: "room", channelType: .message)])
            for client in [watcher, shy, marker, shyElsewhere] { await client.close() }
        }
    }

    @Test("a user with sessions on two nodes is one member: one join, and one leave when the last session leaves")
    func aUserOnTwoNodesIsOneMember() async throws {
        try await withCluster(nodes: 3) { postgres, nodes in
            let watcher = try await nodes[2].client("Watcher")
            let events = PresenceEventIterator(watcher.presenceEvents)
            try await watcher.subscribeChannel(channel: "room")
            _ = try #require(await events.next(seconds: 5))

            let first = try await nodes[0].client("Tony")
            try await first.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let join = try #require(await events.next(seconds: 5))
            #expect(join.eventType == .remoteJoin && join.publisher == "Tony")
            let second = try await nodes[1].client("Tony")
            try await second.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            // Nodes tell each other in the background: the second session is committed before the first leaves.
            let bothWritten = try await eventually {
                try await postgres.psql("SELECT count(*) FROM sb_presence WHERE user_id = 'Tony'::bytea") == "2"
            }
            #expect(bothWritten)
            try await first.unsubscribeChannel(channel: "room")
            // A marker joining after the first session left comes next: nothing was said about Tony meanwhile.
            let marker = try await nodes[0].client("Marker")
            try await marker.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let next = try #require(await events.next(seconds: 5))
            #expect(next.eventType == .remoteJoin && next.publisher == "Marker")
            #expect(try await watcher.whoNow(channel: "room").users.map(\.userId) == ["Marker", "Tony", "Watcher"])

            try await second.unsubscribeChannel(channel: "room")
            let leave = try #require(await events.next(seconds: 5))
            #expect(leave.eventType == .remoteLeave && leave.publisher == "Tony" && leave.totalOccupancy == 2)
            for client in [watcher, first, second, marker] { await client.close() }
        }
    }

    @Test("a node that starts later lists the members already there and tells its members when they leave")
    func aStartingNodeLoadsTheMembersAlreadyThere() async throws {
        let postgres = try await TestPostgres.start()
        try await withCluster(nodes: 1, postgres: postgres) { _, first in
            let tony = try await first[0].client("Tony")
            try await tony.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            try await tony.setState(channel: "room", items: [StateItem(key: "seat", value: "7")])
            // The rows are written in the background: wait until they are in the table.
            let written = try await eventually {
                let sessions = try await postgres.psql("SELECT count(*) FROM sb_presence")
                let states = try await postgres.psql(
                    "SELECT count(*) FROM sb_presence_state WHERE position('seat'::bytea IN state) > 0")
                return sessions == "1" && states == "1"
            }
            #expect(written)
            try await withCluster(nodes: 1, postgres: postgres) { _, later in
                let watcher = try await later[0].client("Watcher")
                let page = try await watcher.whoNow(channel: "room", includeState: true)
                #expect(page.users == [UserState(userId: "Tony", states: [StateItem(key: "seat", value: "7")])])
                let events = PresenceEventIterator(watcher.presenceEvents)
                try await watcher.subscribeChannel(channel: "room")
                let snapshot = try #require(await events.next(seconds: 5))
                #expect(snapshot.eventType == .snapshot && snapshot.snapshot.map(\.userId) == ["Tony", "Watcher"])
                try await tony.unsubscribeChannel(channel: "room")
                let leave = try #require(await events.next(seconds: 5))
                #expect(leave.eventType == .remoteLeave && leave.publisher == "Tony")
                await watcher.close()
            }
            await tony.close()
        }
        await postgres.stop()
    }
}

/// Presence when a real `switchboard --cluster` process dies.
@Suite("Cluster presence processes", .serialized, .timeLimit(.minutes(3)))
struct ClusterPresenceProcessTests {
    @Test("the members of a node killed with kill -9 time out on the survivors: gone from whoNow and whereNow, one remoteTimeout each per subscriber")
    func membersOfAKilledNodeTimeOutOnceOnTheSurvivors() async throws {
        // A presence timeout shorter than the default node timeout (10 s), which it shortens to 4 s: the members go as
        // soon as the node is seen dead, about 5 s after it died.
        try await ClusterProcessTests.withNodes(3, arguments: ["--presence-timeout", "5"]) { postgres, nodes in
            var watchers: [SwitchboardClient] = []
            var events: [PresenceEventIterator] = []
            for node in nodes.dropFirst() {
                let watcher = try await node.client("Watcher\(node.port)")
                let iterator = PresenceEventIterator(watcher.presenceEvents)
                try await watcher.subscribeChannel(channel: "room")
                watchers.append(watcher)
                events.append(iterator)
            }
            let doomedUsers = (0..<5).map { "v\($0)" }
            var doomed: [SwitchboardClient] = []
            for user in doomedUsers {
                let client = try await nodes[0].client(user)
                try await client.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
                try await client.subscribeChannel(channel: "other", options: ChannelSubscriptionOptions(withPresence: false))
                doomed.append(client)
            }
            for watcher in watchers {
                let joined = try await eventually(seconds: 10) {
                    try await watcher.whoNow(channel: "room").totalOccupancy == 7
                }
                #expect(joined)
            }
            let written = try await eventually(seconds: 10) {
                try await postgres.psql("SELECT count(*) FROM sb_presence") == "12"
            }
            #expect(written)

            let killedAt = ContinuousClock.now
            nodes[0].process.signal(SIGKILL)
            _ = await nodes[0].process.waitForExit()
            for watcher in watchers {
                let gone = try await eventually(seconds: 25) {
                    try await watcher.whoNow(channel: "room").users.map(\.userId).allSatisfy { $0.hasPrefix("Watcher") }
                }
                let after = ContinuousClock.now - killedAt
                #expect(gone && after < .seconds(9), "the killed node's members were still listed after \(after)")
                for user in doomedUsers {
                    let channels = try await watcher.whereNow(userID: user)
                    #expect(channels.totalChannel == 0, "\(user) is still in \(channels.channels)")
                }
            }
            #expect(try await postgres.psql("SELECT count(*) FROM sb_presence") == "2")

            // A marker joining afterwards is seen after everything the sweep caused; count what came before it.
            let marker = try await nodes[1].client("Marker")
            try await marker.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            for (index, iterator) in events.enumerated() {
                var timeouts: [String: Int] = [:]
                var leaves = 0
                var sawMarker = false
                while let event = await iterator.next(seconds: 10) {
                    if event.eventType == .remoteJoin && event.publisher == "Marker" {
                        sawMarker = true
                        break
                    }
                    if event.eventType == .remoteTimeout { timeouts[event.publisher, default: 0] += 1 }
                    if event.eventType == .remoteLeave { leaves += 1 }
                    for user in event.timedOut { timeouts[user, default: 0] += 1 }
                }
                #expect(sawMarker, "watcher \(index) never saw the marker join")
                #expect(timeouts == Dictionary(uniqueKeysWithValues: doomedUsers.map { ($0, 1) }), "watcher \(index): \(timeouts)")
                #expect(leaves == 0)
            }
            for client in watchers + doomed + [marker] { await client.close() }
        }
    }
    @Test("a user of a killed node who comes back on another node within the presence timeout causes no event at all")
    func aUserWhoComesBackInTimeCausesNoEvent() async throws {
        // The default presence timeout (30 s) outlasts the node timeout (10 s): the sweep leaves 20 s to come back.
        try await ClusterProcessTests.withNodes(3) { postgres, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let events = PresenceEventIterator(watcher.presenceEvents)
            try await watcher.subscribeChannel(channel: "room")
            _ = try #require(await events.next(seconds: 10))
            let first = try await nodes[0].client("Tony")
            try await first.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let join = try #require(await events.next(seconds: 10))
            #expect(join.eventType == .remoteJoin && join.publisher == "Tony")

            nodes[0].process.signal(SIGKILL)
            _ = await nodes[0].process.waitForExit()
            let swept = try await eventually(seconds: 25) {
                try await postgres.psql("SELECT count(*) FROM sb_presence WHERE user_id = 'Tony'::bytea") == "0"
            }
            #expect(swept, "the killed node's presence rows were not swept")
            #expect(try await watcher.whoNow(channel: "room").users.map(\.userId) == ["Tony", "Watcher"])

            let again = try await nodes[2].client("Tony")
            try await again.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let marker = try await nodes[2].client("Marker")
            try await marker.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let next = try #require(await events.next(seconds: 10))
            #expect(next.eventType == .remoteJoin && next.publisher == "Marker", "\(next.eventType) about \(next.publisher)")
            #expect(try await watcher.whoNow(channel: "room").users.map(\.userId) == ["Marker", "Tony", "Watcher"])
            for client in [watcher, first, again, marker] { await client.close() }
        }
    }

    @Test("a node stopped gracefully removes its presence rows; its users time out once on the others")
    func aNodeStoppedGracefullyLeavesNoPresenceBehind() async throws {
        try await ClusterProcessTests.withNodes(2, arguments: ["--presence-timeout", "5"]) { postgres, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let events = PresenceEventIterator(watcher.presenceEvents)
            try await watcher.subscribeChannel(channel: "room")
            _ = try #require(await events.next(seconds: 10))
            var leaving: [SwitchboardClient] = []
            for user in ["v0", "v1"] {
                let client = try await nodes[0].client(user)
                try await client.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
                leaving.append(client)
            }
            for _ in 0..<2 {
                let join = try #require(await events.next(seconds: 10))
                #expect(join.eventType == .remoteJoin)
            }
            nodes[0].process.signal(SIGTERM)
            for client in leaving { await client.close() }
            #expect(await nodes[0].process.waitForExit(seconds: 30) == 0)
            #expect(try await postgres.psql("SELECT count(*) FROM sb_presence") == "1")
            #expect(try await postgres.psql("SELECT count(*) FROM sb_presence_state WHERE user_id <> 'Watcher'::bytea") == "0")
            var timedOut: [String] = []
            for _ in 0..<2 {
                let event = try #require(await events.next(seconds: 15))
                #expect(event.eventType == .remoteTimeout)
                timedOut.append(event.publisher)
            }
            #expect(timedOut.sorted() == ["v0", "v1"])
            #expect(try await watcher.whoNow(channel: "room").users.map(\.userId) == ["Watcher"])
            let marker = try await nodes[1].client("Marker")
            try await marker.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let next = try #require(await events.next(seconds: 10))
            #expect(next.eventType == .remoteJoin && next.publisher == "Marker")
            await marker.close()
            await watcher.close()
        }
    }
}

/// Where a cluster keeps presence: the tests that hold for both run once with each.
enum PresenceEngine: CaseIterable, Sendable, CustomTestStringConvertible {
    /// PostgreSQL alone (`sb_presence`).
    case postgres
    /// With `--redis`: presence in Redis.
    case redis

    var testDescription: String { self == .postgres ? "PostgreSQL" : "Redis" }

    /// Runs `body` against `count` nodes of a cluster keeping presence in this engine (with a Redis server of the
    /// call's own for ``redis``).
    func withCluster<T: Sendable>(
        nodes count: Int, _ body: @Sendable (TestPostgres, [ClusterNode]) async throws -> T
    ) async throws -> T {
        switch self {
        case .postgres:
            return try await SwitchboardClusterTests.withCluster(nodes: count, body)
        case .redis:
            let redis = try await TestRedis.start()
            let result = await Result { try await SwitchboardClusterTests.withCluster(nodes: count, redis: redis, body) }
            await redis.stop()
            return try result.get()
        }
    }
}
