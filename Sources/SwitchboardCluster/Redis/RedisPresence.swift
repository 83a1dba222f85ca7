import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import SwitchboardRedis
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// Presence in Redis (`switchboard --cluster URL --redis HOST:PORT`) instead of `sb_presence`.
///
/// Per channel (`CID` = `type:name`) Redis holds a HASH `sb:presence:m:CID` (field `NODE/SESSION` -> the member
/// record: session, user, channel and quiet flag), a ZSET `sb:presence:x:CID` (same field -> expires-at in ms, pushed
/// forward by the owning node every ``RedisPresenceWriter/refreshInterval``) and a HASH `sb:presence:s:CID` (field
/// `NODE/USER` -> the user's state there). Per node, the SETs `sb:presence:node:NODE:sessions` and `...:states`
/// index its entries (`LEN:CID` followed by the field), so a dead node's entries go at once; the ZSET
/// `sb:presence:nodes` holds when each node's entries expire, and the SET `sb:presence:channels` lists the channels
/// for a starting node's load (which skips expired entries).
///
/// Each batch of a node's changes is one `MULTI`/`EXEC` that updates the keys and publishes the batch on
/// ``RedisPresenceKeys/pubSubChannel``, so the other nodes get every node's changes in its order and apply them
/// through their ``PresenceMirror``. A dead node is swept by the live node whose heartbeat transaction removes it
/// (``RedisPresenceSweeper``), or, if its entries expire first (it stopped refreshing them while still in `sb_node`,
/// or Redis was unreachable for the sweeper), by any node's ``RedisPresenceKeys/reapScript``: either script removes
/// the entries and publishes their timeouts atomically, so they are published once.
final class RedisPresenceStore: PresenceStore {
    let presence: PostgresPresence
    let location: RedisLocation
    let logger: Logger
    let inbox: RedisPresenceInbox
    private let subscriber = Mutex<RedisConnection?>(nil)

    init(presence: PostgresPresence, location: RedisLocation, logger: Logger) {
        self.presence = presence
        self.location = location
        self.logger = logger
        self.inbox = RedisPresenceInbox(nodeID: presence.nodeID, logger: logger)
    }

    /// Subscribes (buffering what arrives until the mirror exists), then reads every live entry of the other nodes.
    func load(on connection: PostgresConnection, logger: Logger) async throws -> [PresenceChange] {
        try await self.subscribe()
        let commands = try await self.connect()
        do {
            let snapshot = try await Self.snapshot(on: commands, excluding: self.presence.nodeID)
            await commands.close()
            return snapshot
        } catch {
            await commands.close()
            throw error
        }
    }

    func makeParts(
        mirror: PresenceMirror, loaded: [PresenceChange], deadFor: Duration, logger: Logger
    ) -> PresenceStoreParts {
        self.inbox.attach(mirror, snapshot: loaded)
        return PresenceStoreParts(
            services: [RedisPresenceWriter(store: self, expiry: deadFor + .seconds(5), logger: logger)],
            feedConsumer: nil,
            sweeper: RedisPresenceSweeper(location: self.location, deadFor: deadFor))
    }

    func discard() {
        self.inbox.discard()
        Task { await self.closeSubscriber() }
    }

    func connect() async throws -> RedisConnection {
        try await RedisConnection.connect(host: self.location.host, port: self.location.port)
    }

    /// Whether the subscription is up.
    var isSubscribed: Bool { self.subscriber.withLock { $0.map { !$0.isClosed } ?? false } }

    /// Opens a subscriber connection to the presence channel; its messages go to the inbox.
    func subscribe() async throws {
        let inbox = self.inbox
        let connection = try await RedisConnection.connect(host: self.location.host, port: self.location.port) {
            inbox.receive($0)
        }
        do {
            try await connection.subscribe([RedisPresenceKeys.pubSubChannel])
        } catch {
            await connection.close()
            throw error
        }
        let previous = self.subscriber.withLock { current -> RedisConnection? in
            defer { current = connection }
            return current
        }
        await previous?.close()
    }

    /// Subscribes again after the subscription was lost and brings the mirror up to date with Redis: messages are
    /// held while the entries are read, then applied after them.
    func resubscribe() async throws {
        self.inbox.pause()
        do {
            try await self.subscribe()
            let commands = try await self.connect()
            do {
                let snapshot = try await Self.snapshot(on: commands, excluding: self.presence.nodeID)
                await commands.close()
                self.inbox.resume(snapshot: snapshot)
            } catch {
                await commands.close()
                throw error
            }
        } catch {
            // Not subscribed, so tried again (and the messages held until then).
            await self.closeSubscriber()
            throw error
        }
    }

    func closeSubscriber() async {
        let connection = self.subscriber.withLock { current -> RedisConnection? in
            defer { current = nil }
            return current
        }
        await connection?.close()
    }

    /// Every live (not expired) entry of the nodes other than `node`, with its user's state, as joins.
    static func snapshot(on connection: RedisConnection, excluding node: String) async throws -> [PresenceChange] {
        let channels = try await connection.command("SMEMBERS", .string(RedisPresenceKeys.channels)).array ?? []
        let ids = channels.compactMap(\.string).sorted()
        guard !ids.isEmpty else { return [] }
        let now = systemNowMillis()
        var commands: [[RESPArgument]] = []
        for id in ids {
            commands.append(["HGETALL", .string(RedisPresenceKeys.members(id))])
            commands.append(["ZRANGEBYSCORE", .string(RedisPresenceKeys.expiry(id)), .integer(now), "+inf"])
            commands.append(["HGETALL", .string(RedisPresenceKeys.states(id))])
        }
        let replies = try await connection.pipeline(commands)
        var changes: [PresenceChange] = []
        for index in ids.indices {
            for reply in replies[(3 * index)..<(3 * index + 3)] {
                if let message = reply.errorMessage { throw RedisConnection.ErrorReply(message: message) }
            }
            let live = Set((replies[3 * index + 1].array ?? []).compactMap(\.string))
            var states: [String: [StateItem]] = [:]
            let stateFields = replies[3 * index + 2].array ?? []
            for pair in stride(from: 0, to: stateFields.count - 1, by: 2) {
                guard let field = stateFields[pair].string, var value = stateFields[pair + 1].bytes else { continue }
                states[field] = try PresenceChangeCoding.readItems(&value)
            }
            let members = replies[3 * index].array ?? []
            for pair in stride(from: 0, to: members.count - 1, by: 2) {
                guard let field = members[pair].string, live.contains(field), let record = members[pair + 1].bytes
                else { continue }
                let (session, quiet) = try RedisPresenceKeys.readRecord(record)
                guard session.node != node else { continue }
                let state = states[RedisPresenceKeys.stateField(node: session.node, userID: session.userID)] ?? []
                changes.append(.joined(session, quiet: quiet, state: state))
            }
        }
        return changes
    }
}

/// Redis key names, record formats and scripts of ``RedisPresenceStore``.
enum RedisPresenceKeys {
    /// The pub/sub channel every node's presence changes travel on.
    static let pubSubChannel = "switchboard:presence"
    /// The SET of channel ids that have (or had) members.
    static let channels = "sb:presence:channels"

    static func channelID(_ key: ChannelKey) -> String { "\(key.type.rawValue):\(key.name)" }
    static func members(_ channelID: String) -> String { "sb:presence:m:" + channelID }
    static func expiry(_ channelID: String) -> String { "sb:presence:x:" + channelID }
    static func states(_ channelID: String) -> String { "sb:presence:s:" + channelID }
    static func nodeSessions(_ node: String) -> String { "sb:presence:node:\(node):sessions" }
    static func nodeStates(_ node: String) -> String { "sb:presence:node:\(node):states" }
    static func sessionField(node: String, session: UInt64) -> String { "\(node)/\(session)" }
    static func stateField(node: String, userID: String) -> String { "\(node)/\(userID)" }
    /// A node index member: the channel id's UTF-8 length, `:`, the id, then the field (split by the scripts).
    static func indexMember(_ channelID: String, _ field: String) -> String {
        "\(channelID.utf8.count):\(channelID)\(field)"
    }

    /// A member record: the session as in a change feed payload, then the quiet flag (the sweep script turns it into
    /// a `left` change).
    static func record(_ session: PresenceChange.Session, quiet: Bool) -> ByteBuffer {
        var buffer = ByteBuffer()
        PresenceChangeCoding.write(session, to: &buffer)
        buffer.writeInteger(UInt8(quiet ? 1 : 0))
        return buffer
    }

    static func readRecord(_ record: ByteBuffer) throws -> (PresenceChange.Session, quiet: Bool) {
        var buffer = record
        let session = try PresenceChangeCoding.readSession(&buffer)
        guard let quiet = buffer.readInteger(as: UInt8.self) else { throw PresenceChangeCoding.malformed }
        return (session, quiet != 0)
    }

    /// The ZSET of nodes with entries: node -> when its entries expire (ms), pushed forward with them.
    static let nodes = "sb:presence:nodes"

    /// Lua shared by the scripts: `split` (an index member into channel id and field), `be64` (a number as 8
    /// big-endian bytes) and `sweep` (removes every entry of a node and, when `channel` is given, publishes there one
    /// message with a `left` (timed out, `elapsed` bytes) per removed session, from no node, so every node applies it).
    private static let prelude = #"""
        local function split(m)
          local digits = string.match(m, '^(%d+):')
          local start = #digits + 2
          local length = tonumber(digits)
          return string.sub(m, start, start + length - 1), string.sub(m, start + length)
        end
        local function be64(n)
          local bytes = {}
          for i = 8, 1, -1 do
            bytes[i] = string.char(n % 256)
            n = math.floor(n / 256)
          end
          return table.concat(bytes)
        end
        local function sweep(node, elapsed, channel)
          local sessions = 'sb:presence:node:' .. node .. ':sessions'
          local states = 'sb:presence:node:' .. node .. ':states'
          local lefts = {}
          for _, m in ipairs(redis.call('SMEMBERS', sessions)) do
            local cid, field = split(m)
            local record = redis.call('HGET', 'sb:presence:m:' .. cid, field)
            redis.call('HDEL', 'sb:presence:m:' .. cid, field)
            redis.call('ZREM', 'sb:presence:x:' .. cid, field)
            if record then
              lefts[#lefts + 1] = '\2' .. string.sub(record, 1, #record - 1) .. '\2' .. elapsed
            end
          end
          for _, m in ipairs(redis.call('SMEMBERS', states)) do
            local cid, field = split(m)
            redis.call('HDEL', 'sb:presence:s:' .. cid, field)
          end
          redis.call('DEL', sessions, states)
          redis.call('ZREM', 'sb:presence:nodes', node)
          if channel ~= '' and #lefts > 0 then
            local n = #lefts
            local count = string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
              math.floor(n / 256) % 256, n % 256)
            redis.call('PUBLISH', channel, '\1\0\0\1' .. count .. table.concat(lefts))
          end
          return #lefts
        end

        """#

    /// Removes every entry of node `ARGV[1]`; when `ARGV[3]` (a pub/sub channel) is not empty, publishes their
    /// timeouts there, `ARGV[2]` (8 big-endian bytes) ms ago; when `ARGV[4]` is given, marks the node dead for that
    /// many ms (``dead(_:)``), so that it writes nothing more.
    static let sweepScript = prelude + #"""
        if ARGV[4] and ARGV[4] ~= '' then
          redis.call('SET', 'sb:presence:dead:' .. ARGV[1], '1', 'PX', ARGV[4])
        end
        return sweep(ARGV[1], ARGV[2], ARGV[3])
        """#

    /// Set when a node was swept as dead (removed from `sb_node`): its writes are refused from then on.
    static func dead(_ node: String) -> String { "sb:presence:dead:\(node)" }
    /// How long the mark of a dead node lasts (it fences itself well within it).
    static let deadMarkMillis = 600_000

    /// Moves the expiry of node `ARGV[1]` and of its sessions to `ARGV[2]` (ms); returns 0 when the node was not
    /// registered (its entries were reaped or lost: the node writes them again), -1 when it was swept as dead.
    static let refreshScript = prelude + #"""
        if redis.call('EXISTS', 'sb:presence:dead:' .. ARGV[1]) == 1 then return -1 end
        local registered = redis.call('ZSCORE', 'sb:presence:nodes', ARGV[1])
        redis.call('ZADD', 'sb:presence:nodes', ARGV[2], ARGV[1])
        for _, m in ipairs(redis.call('SMEMBERS', 'sb:presence:node:' .. ARGV[1] .. ':sessions')) do
          local cid, field = split(m)
          redis.call('ZADD', 'sb:presence:x:' .. cid, 'XX', ARGV[2], field)
        end
        if registered then return 1 end
        return 0
        """#

    /// Sweeps every node whose entries expired before `ARGV[1]` (ms), publishing their timeouts on `ARGV[3]` as of
    /// their last refresh (expiry minus `ARGV[2]` ms); returns how many nodes.
    static let reapScript = prelude + #"""
        local now = tonumber(ARGV[1])
        local expired = redis.call('ZRANGEBYSCORE', 'sb:presence:nodes', '-inf', '(' .. ARGV[1], 'WITHSCORES')
        for i = 1, #expired, 2 do
          local refreshed = tonumber(expired[i + 1]) - tonumber(ARGV[2])
          sweep(expired[i], be64(math.max(1, now - refreshed)), ARGV[3])
        end
        return #expired / 2
        """#
}

/// A message on ``RedisPresenceKeys/pubSubChannel``: its kind (1: changes, 2: the origin's whole set of sessions,
/// as joins), the origin node (2-byte length + UTF-8; empty for a sweep, which every node applies), then a change
/// feed presence payload (``PresenceChangeCoding``).
enum RedisPresenceMessage {
    static let changes: UInt8 = 1
    static let resync: UInt8 = 2

    static func encode(kind: UInt8, origin: String, changes: [PresenceChange]) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(kind)
        buffer.writeInteger(UInt16(truncatingIfNeeded: origin.utf8.count))
        buffer.writeString(origin)
        var payload = PresenceChangeCoding.encode(changes)
        buffer.writeBuffer(&payload)
        return buffer
    }

    static func decode(_ message: ByteBuffer) throws -> (kind: UInt8, origin: String, changes: [PresenceChange]) {
        var buffer = message
        guard let kind = buffer.readInteger(as: UInt8.self), let length = buffer.readInteger(as: UInt16.self),
            let origin = buffer.readString(length: Int(length))
        else { throw PresenceChangeCoding.malformed }
        return (kind, origin, try PresenceChangeCoding.decode(buffer))
    }
}

/// Where the presence subscription's messages go: held while the mirror does not exist yet or while the entries are
/// read again after a reconnection, then applied in order after that snapshot.
final class RedisPresenceInbox: Sendable {
    private enum Inbound {
        case changes([PresenceChange])
        case resync(node: String, joins: [PresenceChange])
    }

    private struct State {
        var mirror: PresenceMirror?
        var holding = true
        var held: [Inbound] = []
        var discarded = false
    }

    private let nodeID: String
    private let logger: Logger
    private let state = Mutex(State())

    init(nodeID: String, logger: Logger) {
        self.nodeID = nodeID
        self.logger = logger
    }

    func receive(_ message: RedisConnection.Message) {
        let inbound: Inbound
        do {
            let (kind, origin, changes) = try RedisPresenceMessage.decode(message.payload)
            // The node applied its own changes already.
            guard origin != self.nodeID else { return }
            inbound = kind == RedisPresenceMessage.resync ? .resync(node: origin, joins: changes) : .changes(changes)
        } catch {
            self.logger.error("malformed presence message skipped")
            return
        }
        self.state.withLock { state in
            if state.discarded {
                return
            } else if state.holding || state.mirror == nil {
                state.held.append(inbound)
            } else if let mirror = state.mirror {
                Self.deliver(inbound, to: mirror)
            }
        }
    }

    /// The mirror exists, holding `snapshot`'s sessions: deliver what was held, then everything as it comes.
    func attach(_ mirror: PresenceMirror, snapshot: [PresenceChange]) {
        self.state.withLock { state in
            state.mirror = mirror
            Self.release(&state, snapshot: snapshot)
        }
    }

    /// Drops what is held and whatever comes (the node serves no presence).
    func discard() {
        self.state.withLock { state in
            state.discarded = true
            state.held = []
        }
    }

    /// Holds messages until ``resume(snapshot:)``.
    func pause() {
        self.state.withLock { $0.holding = true }
    }

    /// Makes the mirror's other nodes' sessions those of `snapshot`, then delivers what was held.
    func resume(snapshot: [PresenceChange]) {
        self.state.withLock { state in Self.release(&state, snapshot: snapshot) }
    }

    private static func release(_ state: inout State, snapshot: [PresenceChange]) {
        guard let mirror = state.mirror else { return }
        // The mirror holds only other nodes' sessions, as does the snapshot.
        mirror.reconcile(with: snapshot, covering: { _ in true })
        for inbound in state.held { Self.deliver(inbound, to: mirror) }
        state.held = []
        state.holding = false
    }

    private static func deliver(_ inbound: Inbound, to mirror: PresenceMirror) {
        switch inbound {
        case .changes(let changes):
            mirror.apply(changes)
        case .resync(let node, let joins):
            mirror.reconcile(with: joins, covering: { $0 == node })
        }
    }
}

/// The node's own sessions and states as last reported, so they can be written again after Redis lost them or the
/// connection broke in the middle of a batch.
private struct OwnEntries {
    struct UserChannel: Hashable {
        var userID: String
        var channel: ChannelKey
    }

    var sessions: [PresenceChange.Session: Bool] = [:]
    var states: [UserChannel: [StateItem]] = [:]
    var sessionCounts: [UserChannel: Int] = [:]
}

/// Writes what the node's sessions do to Redis in batches (one `MULTI`/`EXEC` each, publishing the batch), keeps
/// the node's entries from expiring, and keeps the subscription up. After a broken connection it writes the node's
/// whole set again (and tells the others, which drop what is not in it) and reloads the other nodes' entries.
final class RedisPresenceWriter: Service, Sendable {
    /// How often the node pushes its entries' expiry forward.
    static let refreshInterval = Duration.seconds(2)
    private static let batchLimit = 1_000

    private let store: RedisPresenceStore
    /// How long an entry lives without a refresh.
    private let expiry: Duration
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)
    /// The node was swept as dead: it writes nothing more (it is about to fence itself).
    private let swept = Atomic<Bool>(false)

    init(store: RedisPresenceStore, expiry: Duration, logger: Logger) {
        self.store = store
        self.expiry = expiry
        self.logger = logger
    }

    private var nodeID: String { self.store.presence.nodeID }

    func run() async throws {
        var own = OwnEntries()
        var connection: RedisConnection?
        var needsRewrite = false
        var backoff = ReconnectPolicy.connection.backoff()
        let clock = ContinuousClock()
        var lastRefresh = clock.now
        await withGracefulShutdownHandler {
            while !self.stopping.load(ordering: .relaxed) && !Task.isCancelled {
                do {
                    let current: RedisConnection
                    if let open = connection, !open.isClosed {
                        current = open
                    } else {
                        // A connection lost between batches may have lost writes with it, or Redis its data.
                        if connection != nil { needsRewrite = true }
                        current = try await self.store.connect()
                        connection = current
                    }
                    if needsRewrite {
                        try await self.rewrite(own, on: current)
                        needsRewrite = false
                    }
                    if !self.store.isSubscribed {
                        try await self.store.resubscribe()
                    }
                    while try await self.writeBatch(&own, on: current) {}
                    if clock.now - lastRefresh >= Self.refreshInterval {
                        let refreshed = try await current.send([
                            "EVAL", .string(RedisPresenceKeys.refreshScript), "0", .string(self.nodeID),
                            .integer(self.expiresAt()),
                        ])
                        try Self.check(refreshed)
                        lastRefresh = clock.now
                        // Reaped (the node could not refresh in time) or lost by Redis: write everything again.
                        if refreshed.integer == 0 { needsRewrite = true }
                        if refreshed.integer == -1 { self.noteSwept() }
                        // Any node sweeps the nodes that stopped refreshing; the script does each once.
                        try Self.check(
                            try await current.send([
                                "EVAL", .string(RedisPresenceKeys.reapScript), "0", .integer(systemNowMillis()),
                                .integer(Int64(self.expiry / .milliseconds(1))), .string(RedisPresenceKeys.pubSubChannel),
                            ]))
                    }
                    backoff.succeeded()
                    await self.store.presence.wakeup.wait(timeout: .milliseconds(500))
                } catch {
                    self.logger.warning(
                        "presence write to Redis failed; connecting again",
                        metadata: ["error": "\(String(reflecting: error))"])
                    if let open = connection { await open.close() }
                    connection = nil
                    needsRewrite = true
                    try? await backoff.wait()
                }
            }
        } onGracefulShutdown: {
            self.stopping.store(true, ordering: .relaxed)
            self.store.presence.wakeup.signal()
        }
        // The gateway stopped first: write its sessions' leaves, then remove whatever entries of the node remain.
        do {
            let current: RedisConnection
            if let open = connection, !open.isClosed {
                current = open
            } else {
                current = try await self.store.connect()
                connection = current
            }
            while try await self.writeBatch(&own, on: current) {}
            try await Self.check(
                current.send([
                    "EVAL", .string(RedisPresenceKeys.sweepScript), "0", .string(self.nodeID), "", "",
                ]))
        } catch {
            self.logger.warning("presence entries not removed from Redis at shutdown", metadata: ["error": "\(error)"])
        }
        if let connection { await connection.close() }
        await self.store.closeSubscriber()
    }

    private func expiresAt() -> Int64 {
        systemNowMillis() + Int64(self.expiry / .milliseconds(1))
    }

    /// Writes one batch; true when one was written (more may be queued). The changes count as the node's own
    /// entries even when the write fails: the rewrite after reconnecting carries them.
    private func writeBatch(_ own: inout OwnEntries, on connection: RedisConnection) async throws -> Bool {
        let changes = self.store.presence.take(limit: Self.batchLimit)
        guard !changes.isEmpty else { return false }
        guard !self.swept.load(ordering: .relaxed) else { return true }
        let expiresAt = self.expiresAt()
        var commands: [[RESPArgument]] = [
            ["ZADD", .string(RedisPresenceKeys.nodes), .integer(expiresAt), .string(self.nodeID)]
        ]
        for change in changes {
            self.commands(for: change, own: &own, expiresAt: expiresAt, into: &commands)
        }
        commands.append([
            "PUBLISH", .string(RedisPresenceKeys.pubSubChannel),
            .bytes(
                RedisPresenceMessage.encode(kind: RedisPresenceMessage.changes, origin: self.nodeID, changes: changes)),
        ])
        try await self.execute(commands, on: connection)
        return true
    }

    /// Runs `commands` in one `MULTI`/`EXEC` unless the node was swept as dead: `WATCH` on its dead mark makes the
    /// transaction fail if the mark appears between the check and `EXEC`.
    private func execute(_ commands: [[RESPArgument]], on connection: RedisConnection) async throws {
        let dead = RedisPresenceKeys.dead(self.nodeID)
        let checked = try await connection.pipeline([["WATCH", .string(dead)], ["EXISTS", .string(dead)]])
        try Self.check(checked)
        guard checked[1].integer == 0 else {
            _ = try await connection.send(["UNWATCH"])
            self.noteSwept()
            return
        }
        let replies = try await connection.pipeline([["MULTI"]] + commands + [["EXEC"]])
        try Self.check(replies)
        if replies.last?.isNull == true { self.noteSwept() }
    }

    private func noteSwept() {
        guard !self.swept.exchange(true, ordering: .relaxed) else { return }
        self.logger.warning(
            "this node was swept as dead; its presence is no longer written to Redis", metadata: ["node": "\(self.nodeID)"])
    }

    /// Writes the node's whole set again (after its entries may have been lost or half written) and publishes it,
    /// so the other nodes drop the sessions of the node that are not in it.
    private func rewrite(_ own: OwnEntries, on connection: RedisConnection) async throws {
        guard !self.swept.load(ordering: .relaxed) else { return }
        let expiresAt = self.expiresAt()
        var commands: [[RESPArgument]] = [
            ["EVAL", .string(RedisPresenceKeys.sweepScript), "0", .string(self.nodeID), "", ""],
            ["ZADD", .string(RedisPresenceKeys.nodes), .integer(expiresAt), .string(self.nodeID)],
        ]
        var joins: [PresenceChange] = []
        var scratch = OwnEntries()
        for (session, quiet) in own.sessions {
            let state = own.states[OwnEntries.UserChannel(userID: session.userID, channel: session.channel)] ?? []
            let join = PresenceChange.joined(session, quiet: quiet, state: state)
            joins.append(join)
            self.commands(for: join, own: &scratch, expiresAt: expiresAt, into: &commands)
        }
        commands.append([
            "PUBLISH", .string(RedisPresenceKeys.pubSubChannel),
            .bytes(RedisPresenceMessage.encode(kind: RedisPresenceMessage.resync, origin: self.nodeID, changes: joins)),
        ])
        try await self.execute(commands, on: connection)
    }

    private func commands(
        for change: PresenceChange, own: inout OwnEntries, expiresAt: Int64, into commands: inout [[RESPArgument]]
    ) {
        let node = self.nodeID
        switch change {
        case .joined(let session, let quiet, let state):
            let id = RedisPresenceKeys.channelID(session.channel)
            let field = RedisPresenceKeys.sessionField(node: node, session: session.session)
            let userChannel = OwnEntries.UserChannel(userID: session.userID, channel: session.channel)
            if own.sessions.updateValue(quiet, forKey: session) == nil {
                own.sessionCounts[userChannel, default: 0] += 1
            }
            commands.append([
                "HSET", .string(RedisPresenceKeys.members(id)), .string(field),
                .bytes(RedisPresenceKeys.record(session, quiet: quiet)),
            ])
            commands.append(["ZADD", .string(RedisPresenceKeys.expiry(id)), .integer(expiresAt), .string(field)])
            commands.append([
                "SADD", .string(RedisPresenceKeys.nodeSessions(node)),
                .string(RedisPresenceKeys.indexMember(id, field)),
            ])
            commands.append(["SADD", .string(RedisPresenceKeys.channels), .string(id)])
            self.stateCommands(userChannel, state, own: &own, into: &commands)
        case .left(let session, _, _):
            let id = RedisPresenceKeys.channelID(session.channel)
            let field = RedisPresenceKeys.sessionField(node: node, session: session.session)
            commands.append(["HDEL", .string(RedisPresenceKeys.members(id)), .string(field)])
            commands.append(["ZREM", .string(RedisPresenceKeys.expiry(id)), .string(field)])
            commands.append([
                "SREM", .string(RedisPresenceKeys.nodeSessions(node)),
                .string(RedisPresenceKeys.indexMember(id, field)),
            ])
            let userChannel = OwnEntries.UserChannel(userID: session.userID, channel: session.channel)
            guard own.sessions.removeValue(forKey: session) != nil else { return }
            let remaining = (own.sessionCounts[userChannel] ?? 1) - 1
            guard remaining <= 0 else {
                own.sessionCounts[userChannel] = remaining
                return
            }
            // The user's last session on this node left the channel: their state here goes too.
            own.sessionCounts[userChannel] = nil
            own.states[userChannel] = nil
            let stateField = RedisPresenceKeys.stateField(node: node, userID: session.userID)
            commands.append(["HDEL", .string(RedisPresenceKeys.states(id)), .string(stateField)])
            commands.append([
                "SREM", .string(RedisPresenceKeys.nodeStates(node)),
                .string(RedisPresenceKeys.indexMember(id, stateField)),
            ])
        case .state(_, let userID, let channel, let state):
            let userChannel = OwnEntries.UserChannel(userID: userID, channel: channel)
            self.stateCommands(userChannel, state, own: &own, into: &commands)
        }
    }

    private func stateCommands(
        _ userChannel: OwnEntries.UserChannel, _ state: [StateItem], own: inout OwnEntries,
        into commands: inout [[RESPArgument]]
    ) {
        own.states[userChannel] = state
        let id = RedisPresenceKeys.channelID(userChannel.channel)
        let field = RedisPresenceKeys.stateField(node: self.nodeID, userID: userChannel.userID)
        var items = ByteBuffer()
        PresenceChangeCoding.writeItems(state, to: &items)
        commands.append(["HSET", .string(RedisPresenceKeys.states(id)), .string(field), .bytes(items)])
        commands.append([
            "SADD", .string(RedisPresenceKeys.nodeStates(self.nodeID)),
            .string(RedisPresenceKeys.indexMember(id, field)),
        ])
    }

    /// Throws the first error reply, `EXEC`'s included.
    static func check(_ replies: [RESPToken]) throws {
        for reply in replies {
            if let message = reply.errorMessage { throw RedisConnection.ErrorReply(message: message) }
            if let elements = reply.array { try Self.check(elements) }
        }
    }

    static func check(_ reply: RESPToken) throws {
        try Self.check([reply])
    }
}

/// Removes a dead node's entries from Redis and publishes their timeouts (to every node, this one included), in one
/// script per node, from the heartbeat transaction that removes the node's `sb_node` row. A second run finds
/// nothing, so each session times out once. When Redis cannot be reached, the sweep is left to the reap script
/// (the entries expire, and any node sweeps them once Redis is back), so the other areas' sweeps of the node are
/// not held up.
struct RedisPresenceSweeper: DeadNodeSweeper {
    let location: RedisLocation
    /// How long a node swept has been dead.
    let deadFor: Duration

    func sweep(deadNodes: [String], on connection: PostgresConnection, logger: Logger) async throws
        -> @Sendable () -> Void
    {
        var elapsed = ByteBuffer()
        elapsed.writeInteger(max(1, Int64(self.deadFor / .milliseconds(1))))
        do {
            let redis = try await RedisConnection.connect(host: self.location.host, port: self.location.port)
            do {
                for node in deadNodes {
                    try RedisPresenceWriter.check(
                        try await redis.send([
                            "EVAL", .string(RedisPresenceKeys.sweepScript), "0", .string(node), .bytes(elapsed),
                            .string(RedisPresenceKeys.pubSubChannel), .integer(RedisPresenceKeys.deadMarkMillis),
                        ]))
                }
                await redis.close()
            } catch {
                await redis.close()
                throw error
            }
        } catch {
            logger.warning(
                "dead nodes' presence not swept from Redis; their entries expire instead",
                metadata: ["nodes": "\(deadNodes)", "error": "\(String(reflecting: error))"])
        }
        return {}
    }
}
