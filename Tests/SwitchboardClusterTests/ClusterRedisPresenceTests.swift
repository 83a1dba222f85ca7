import Foundation
import NIOCore
import SwitchboardClient
@testable import SwitchboardCluster
import SwitchboardRedis
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// Presence across the nodes of a cluster run with `--redis`: the members live in Redis (a hash and an expiry zset
/// per channel), not in `sb_presence`, and the same rules hold as with PostgreSQL alone.
@Suite("Cluster Redis presence", .serialized, .timeLimit(.minutes(3)))
struct ClusterRedisPresenceTests {
    /// The Redis key of a message channel's members.
    static func membersKey(_ channel: String) -> String { "sb:presence:m:\(ChannelType.message.rawValue):\(channel)" }
    static func expiryKey(_ channel: String) -> String { "sb:presence:x:\(ChannelType.message.rawValue):\(channel)" }

    @Test("with Redis, the members are in a Redis hash and expiry zset per channel, not in sb_presence, and leave them when they go")
    func membersAreKeptInRedisNotInPostgres() async throws {
        let redis = try await TestRedis.start()
        try await withCluster(nodes: 2, redis: redis) { postgres, nodes in
            let tony = try await nodes[0].client("Tony")
            try await tony.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let pepper = try await nodes[1].client("Pepper")
            try await pepper.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let inspector = try await RedisConnection.connect(host: "127.0.0.1", port: redis.port)
            let written = try await eventually {
                let hash = try await inspector.command("HGETALL", .string(Self.membersKey("room"))).array ?? []
                let expiry = try await inspector.command("ZRANGE", .string(Self.expiryKey("room")), "0", "-1").array ?? []
                return hash.count == 4 && expiry.count == 2
            }
            #expect(written, "the two members are not in Redis")
            // The records name their users; the expiry lies in the future.
            let hash = try await inspector.command("HGETALL", .string(Self.membersKey("room"))).array ?? []
            let records = stride(from: 1, to: hash.count, by: 2).compactMap { hash[$0].bytes.map { String(buffer: $0) } }
            #expect(records.contains { $0.contains("Tony") } && records.contains { $0.contains("Pepper") })
            let scores = try await inspector.command("ZRANGE", .string(Self.expiryKey("room")), "0", "-1", "WITHSCORES")
                .array ?? []
            let now = Date().timeIntervalSince1970 * 1000
            #expect(scores.count == 4 && (scores[1].string.flatMap(Double.init) ?? 0) > now)
            #expect(try await postgres.psql("SELECT count(*) FROM sb_presence") == "0")
            #expect(try await postgres.psql("SELECT count(*) FROM sb_presence_state") == "0")

            try await tony.unsubscribeChannel(channel: "room")
            let removed = try await eventually {
                let hash = try await inspector.command("HGETALL", .string(Self.membersKey("room"))).array ?? []
                return hash.count == 2
            }
            #expect(removed, "Tony's entry is still in Redis")
            await inspector.close()
            for client in [tony, pepper] { await client.close() }
        }
        await redis.stop()
    }

    @Test("with Redis, a node that starts later loads the members already there from Redis and tells its members when they leave")
    func aStartingNodeLoadsTheMembersFromRedis() async throws {
        let redis = try await TestRedis.start()
        let postgres = try await TestPostgres.start()
        try await withCluster(nodes: 1, postgres: postgres, redis: redis) { _, first in
            let tony = try await first[0].client("Tony")
            try await tony.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            try await tony.setState(channel: "room", items: [StateItem(key: "seat", value: "7")])
            let inspector = try await RedisConnection.connect(host: "127.0.0.1", port: redis.port)
            let written = try await eventually {
                let states = try await inspector.command(
                    "HGETALL", .string("sb:presence:s:\(ChannelType.message.rawValue):room")
                ).array ?? []
                return states.count == 2 && (states[1].bytes.map { String(buffer: $0) } ?? "").contains("seat")
            }
            #expect(written)
            await inspector.close()
            try await withCluster(nodes: 1, postgres: postgres, redis: redis) { _, later in
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
        await redis.stop()
    }

    @Test("with Redis, after Redis lost its data and every connection, each node writes its members again and changes flow again")
    func aLostRedisConnectionReconnectsAndRewritesTheNodesEntries() async throws {
        let redis = try await TestRedis.start()
        try await withCluster(nodes: 2, redis: redis) { _, nodes in
            let tony = try await nodes[0].client("Tony")
            try await tony.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let pepper = try await nodes[1].client("Pepper")
            try await pepper.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let inspector = try await RedisConnection.connect(host: "127.0.0.1", port: redis.port)
            let written = try await eventually {
                (try await inspector.command("HLEN", .string(Self.membersKey("room"))).integer ?? 0) == 2
            }
            #expect(written)

            try await inspector.command("FLUSHALL")
            try await inspector.command("CLIENT", "KILL", "TYPE", "pubsub")
            try await inspector.command("CLIENT", "KILL", "TYPE", "normal")
            let rewritten = try await eventually(seconds: 10) {
                (try await inspector.command("HLEN", .string(Self.membersKey("room"))).integer ?? 0) == 2
            }
            #expect(rewritten, "the nodes did not write their members again")

            // Both nodes still list both members, and a change made now reaches the other node.
            let bruce = try await nodes[0].client("Bruce")
            try await bruce.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let reader = try await nodes[1].client("Reader")
            let listed = try await eventually(seconds: 10) {
                try await reader.whoNow(channel: "room").users.map(\.userId) == ["Bruce", "Pepper", "Tony"]
            }
            #expect(listed, "node 1 does not list the members after the reconnection")
            try await tony.unsubscribeChannel(channel: "room")
            let left = try await eventually(seconds: 10) {
                try await reader.whoNow(channel: "room").users.map(\.userId) == ["Bruce", "Pepper"]
            }
            #expect(left, "a leave after the reconnection did not reach node 1")
            await inspector.close()
            for client in [tony, pepper, bruce, reader] { await client.close() }
        }
        await redis.stop()
    }

    @Test("with Redis, a node stopped gracefully leaves no entry of its own in Redis; the other node's stay")
    func aNodeStoppedGracefullyRemovesItsEntries() async throws {
        let redis = try await TestRedis.start()
        let postgres = try await TestPostgres.start()
        let inspector = try await RedisConnection.connect(host: "127.0.0.1", port: redis.port)
        try await withCluster(nodes: 1, postgres: postgres, redis: redis) { _, first in
            let pepper = try await first[0].client("Pepper")
            try await pepper.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let (stoppedNode, tonyStillConnected) = try await withCluster(nodes: 1, postgres: postgres, redis: redis) {
                _, second in
                let tony = try await second[0].client("Tony")
                try await tony.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
                try await tony.setState(channel: "room", items: [StateItem(key: "seat", value: "7")])
                let written = try await eventually {
                    let members = try await inspector.command("HLEN", .string(Self.membersKey("room"))).integer
                    let nodes = try await inspector.command("ZCARD", .string(RedisPresenceKeys.nodes)).integer
                    return members == 2 && nodes == 2
                }
                #expect(written, "the two members are not in Redis")
                // Tony stays connected: the stopping node ends his session itself.
                return (second[0].engine.nodeID, tony)
            }
            await tonyStillConnected.close()
            // The stopped node's entries, index sets and registration are gone; Pepper's entry stays.
            let members = try await inspector.command("HGETALL", .string(Self.membersKey("room"))).array ?? []
            #expect(members.count == 2 && (members[1].bytes.map { String(buffer: $0) } ?? "").contains("Pepper"))
            let leftovers = try await inspector.command("KEYS", .string("sb:presence:node:\(stoppedNode):*")).array ?? []
            #expect(leftovers.isEmpty, "\(leftovers)")
            let registered = try await inspector.command("ZSCORE", .string(RedisPresenceKeys.nodes), .string(stoppedNode))
            #expect(registered.isNull)
            let stateFields = try await inspector.command(
                "HKEYS", .string("sb:presence:s:\(ChannelType.message.rawValue):room")
            ).array ?? []
            #expect(stateFields.compactMap(\.string).allSatisfy { !$0.hasPrefix(stoppedNode) }, "\(stateFields)")
            await pepper.close()
        }
        await inspector.close()
        await postgres.stop()
        await redis.stop()
    }

    @Test("with Redis, a node swept as dead while it still runs writes no more presence: its new members reach neither Redis nor the others")
    func aNodeSweptAsDeadWritesNoMore() async throws {
        let redis = try await TestRedis.start()
        try await withCluster(nodes: 2, redis: redis) { _, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let tony = try await nodes[0].client("Tony")
            try await tony.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            let joined = try await eventually {
                try await watcher.whoNow(channel: "room").users.map(\.userId) == ["Tony"]
            }
            #expect(joined)
            // What the node that removes node 0 from sb_node does (node 0 keeps running here, as one cut off from
            // PostgreSQL does until it fences itself): sweep its entries, publish their timeouts, mark it dead.
            let inspector = try await RedisConnection.connect(host: "127.0.0.1", port: redis.port)
            var elapsed = ByteBuffer()
            elapsed.writeInteger(Int64(60_000))
            try await inspector.command(
                "EVAL", .string(RedisPresenceKeys.sweepScript), "0", .string(nodes[0].engine.nodeID), .bytes(elapsed),
                .string(RedisPresenceKeys.pubSubChannel), .integer(RedisPresenceKeys.deadMarkMillis))
            let timedOut = try await eventually {
                try await watcher.whoNow(channel: "room").users.isEmpty
            }
            #expect(timedOut, "Tony did not time out on node 1")

            let bruce = try await nodes[0].client("Bruce")
            try await bruce.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            // Absence: Bruce's join must stay out of Redis and node 1 over more than a refresh interval.
            let deadline = ContinuousClock.now + .seconds(3)
            var stayedOut = true
            while ContinuousClock.now < deadline && stayedOut {
                let members = try await inspector.command("HLEN", .string(Self.membersKey("room"))).integer
                let registered = try await inspector.command(
                    "ZSCORE", .string(RedisPresenceKeys.nodes), .string(nodes[0].engine.nodeID))
                let listed = try await watcher.whoNow(channel: "room").users
                stayedOut = members == 0 && registered.isNull && listed.isEmpty
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(stayedOut, "the swept node still wrote presence")
            await inspector.close()
            for client in [watcher, tony, bruce] { await client.close() }
        }
        await redis.stop()
    }
}

/// Presence with `--redis` when a real `switchboard --cluster` process dies.
@Suite("Cluster Redis presence processes", .serialized, .timeLimit(.minutes(3)))
struct ClusterRedisPresenceProcessTests {
    @Test("with Redis, the members of a node killed with kill -9 time out once on the survivors within the presence timeout and leave Redis")
    func membersOfAKilledNodeTimeOutOnceOnTheSurvivors() async throws {
        let redis = try await TestRedis.start()
        try await ClusterProcessTests.withNodes(3, arguments: ["--presence-timeout", "5"], redis: redis) {
            postgres, nodes in
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
                doomed.append(client)
            }
            for watcher in watchers {
                let joined = try await eventually(seconds: 10) {
                    try await watcher.whoNow(channel: "room").totalOccupancy == 7
                }
                #expect(joined)
            }
            let inspector = try await RedisConnection.connect(host: "127.0.0.1", port: redis.port)
            let written = try await eventually(seconds: 10) {
                (try await inspector.command("HLEN", .string(ClusterRedisPresenceTests.membersKey("room"))).integer ?? 0) == 7
            }
            #expect(written)
            #expect(try await postgres.psql("SELECT count(*) FROM sb_presence") == "0")

            let killedAt = ContinuousClock.now
            nodes[0].process.signal(SIGKILL)
            _ = await nodes[0].process.waitForExit()
            for watcher in watchers {
                let gone = try await eventually(seconds: 25) {
                    try await watcher.whoNow(channel: "room").users.map(\.userId).allSatisfy { $0.hasPrefix("Watcher") }
                }
                let after = ContinuousClock.now - killedAt
                #expect(gone && after < .seconds(9), "the killed node's members were still listed after \(after)")
            }
            let swept = try await eventually(seconds: 5) {
                (try await inspector.command("HLEN", .string(ClusterRedisPresenceTests.membersKey("room"))).integer ?? 0) == 2
            }
            #expect(swept, "the killed node's entries are still in Redis")
            await inspector.close()

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
        await redis.stop()
    }
}

/// Entries of a node that stopped refreshing them in Redis expire and are swept by a live node.
@Suite("Cluster Redis presence expiry", .serialized, .timeLimit(.minutes(3)))
struct ClusterRedisPresenceExpiryTests {
    @Test("with Redis, the members of a node that stopped refreshing its entries time out once on every node and leave Redis")
    func entriesOfANodeThatStoppedRefreshingExpire() async throws {
        let redis = try await TestRedis.start()
        try await withCluster(nodes: 2, redis: redis) { _, nodes in
            var watchers: [SwitchboardClient] = []
            var events: [PresenceEventIterator] = []
            for node in nodes {
                let watcher = try await node.client("Watcher\(node.port)")
                let iterator = PresenceEventIterator(watcher.presenceEvents)
                try await watcher.subscribeChannel(channel: "room")
                watchers.append(watcher)
                events.append(iterator)
            }
            // A node no live node knows of in PostgreSQL wrote two members, then stopped refreshing them: they expired
            // 20 s ago, so their last refresh is older than the presence timeout (30 s) and they time out at once.
            let ghost = "ghostnode"
            let channel = ChannelKey(name: "room", type: .message)
            let id = RedisPresenceKeys.channelID(channel)
            let inspector = try await RedisConnection.connect(host: "127.0.0.1", port: redis.port)
            let expiresAt = Int64(Date().timeIntervalSince1970 * 1000) - 20_000
            var joins: [PresenceChange] = []
            for (number, user) in ["Ghost1", "Ghost2"].enumerated() {
                let session = PresenceChange.Session(node: ghost, session: UInt64(number), userID: user, channel: channel)
                let field = RedisPresenceKeys.sessionField(node: ghost, session: UInt64(number))
                try await inspector.command(
                    "HSET", .string(RedisPresenceKeys.members(id)), .string(field),
                    .bytes(RedisPresenceKeys.record(session, quiet: false)))
                try await inspector.command(
                    "ZADD", .string(RedisPresenceKeys.expiry(id)), .integer(expiresAt), .string(field))
                try await inspector.command(
                    "SADD", .string(RedisPresenceKeys.nodeSessions(ghost)),
                    .string(RedisPresenceKeys.indexMember(id, field)))
                joins.append(.joined(session, quiet: false, state: []))
            }
            try await inspector.command(
                "PUBLISH", .string(RedisPresenceKeys.pubSubChannel),
                .bytes(RedisPresenceMessage.encode(kind: RedisPresenceMessage.changes, origin: ghost, changes: joins)))
            // Each watcher gets the join before the node is registered, so before any sweep of it.
            for iterator in events {
                var joined: Set<String> = []
                while joined.count < 2, let event = await iterator.next(seconds: 5) {
                    if event.eventType == .remoteJoin && event.publisher.hasPrefix("Ghost") { joined.insert(event.publisher) }
                }
                #expect(joined == ["Ghost1", "Ghost2"], "the ghost node's members were not mirrored")
            }
            try await inspector.command("ZADD", .string(RedisPresenceKeys.nodes), .integer(expiresAt), .string(ghost))
            // Refreshes run every 2 s: within a few seconds of the expiry a node sweeps the ghost node.
            for watcher in watchers {
                let gone = try await eventually(seconds: 10) {
                    try await watcher.whoNow(channel: "room").users.map(\.userId).allSatisfy { $0.hasPrefix("Watcher") }
                }
                #expect(gone, "the expired members are still listed")
            }
            let swept = try await eventually {
                let members = try await inspector.command("HLEN", .string(RedisPresenceKeys.members(id))).integer
                let registered = try await inspector.command("ZSCORE", .string(RedisPresenceKeys.nodes), .string(ghost))
                return members == 2 && registered.isNull
            }
            #expect(swept, "the expired entries are still in Redis")
            await inspector.close()
            let marker = try await nodes[1].client("Marker")
            try await marker.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withPresence: false))
            for (index, iterator) in events.enumerated() {
                var timeouts: [String: Int] = [:]
                var sawMarker = false
                while let event = await iterator.next(seconds: 10) {
                    if event.eventType == .remoteJoin && event.publisher == "Marker" {
                        sawMarker = true
                        break
                    }
                    if event.eventType == .remoteTimeout { timeouts[event.publisher, default: 0] += 1 }
                    for user in event.timedOut { timeouts[user, default: 0] += 1 }
                }
                #expect(sawMarker, "watcher \(index) never saw the marker join")
                #expect(timeouts == ["Ghost1": 1, "Ghost2": 1], "watcher \(index): \(timeouts)")
            }
            for client in watchers + [marker] { await client.close() }
        }
        await redis.stop()
    }
}
