import Foundation
import SwitchboardClient
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Nodes that the cluster may consider dead fence themselves and exit; a stopped node's database sessions hold up no
/// one for long. Real `switchboard --cluster` processes paused with SIGSTOP, on a PostgreSQL of the test's own (paused
/// too, to stand for a database that stops answering).
@Suite("Cluster fencing", .serialized, .timeLimit(.minutes(3)))
struct ClusterFencingTests {
    /// A node timeout of 7 s (the presence timeout of 8 s minus a heartbeat) and a short drain.
    static let shortTimeouts = ["--presence-timeout", "8", "--shutdown-grace-ms", "2000"]

    @Test("a node paused past the node timeout fences itself when it resumes: its client is sent away, every node agrees who is there, and a lock the user takes again stays held")
    func aPausedNodeFencesItselfWhenItResumes() async throws {
        try await ClusterProcessTests.withNodes(3, arguments: Self.shortTimeouts) { postgres, nodes in
            let paused = try await nodes[0].client("Paused")
            try await paused.subscribeChannel(channel: "room")
            let watcher = try await nodes[1].client("Watcher")
            try await watcher.subscribeChannel(channel: "room")
            let observer = try await nodes[2].client("Observer")
            for client in [watcher, observer] {
                #expect(try await eventually(seconds: 10) { try await Self.members(of: "room", by: client) == ["Paused", "Watcher"] })
            }
            #expect(try await eventually(seconds: 10) { try await postgres.psql("SELECT count(*) FROM sb_node") == "3" })

            nodes[0].process.signal(SIGSTOP)
            // The others sweep it (7 s and a heartbeat) and its member times out at once (presence timeout 8 s).
            let swept = try await eventually(seconds: 25) { try await postgres.psql("SELECT count(*) FROM sb_node") == "2" }
            #expect(swept)
            #expect(try await eventually(seconds: 10) { try await Self.members(of: "room", by: observer) == ["Watcher"] })
            nodes[0].process.signal(SIGCONT)

            // It fences itself instead of serving on: its client gets GOAWAY and the process exits with 75 (drain grace
            // 2 s + 5 s at most), never registered again.
            let status = await nodes[0].process.waitForExit(seconds: 15)
            #expect(status == 75, "the resumed node's exit status: \(status.map(String.init) ?? "still running")")
            #expect(!paused.state.isConnected)
            #expect(try await postgres.psql("SELECT count(*) FROM sb_node") == "2")

            // The user comes back through another node (a client does so after GOAWAY) and every node lists them.
            let back = paused.state.isConnected ? paused : try await nodes[1].client("Paused")
            try await back.subscribeChannel(channel: "room")
            for client in [watcher, observer] {
                #expect(try await eventually(seconds: 10) { try await Self.members(of: "room", by: client) == ["Paused", "Watcher"] })
            }
            // A lock the user takes now is not swept while they hold it: its lease only starts when their last session
            // ends, and the other nodes check holders' sessions every second (TTL 10 s).
            try await back.setLock(channel: "room", name: "desk", ttlSeconds: 10)
            try await back.acquireLock(channel: "room", name: "desk")
            try await Task.sleep(for: .seconds(14))
            let desk = try await observer.getLocks(channel: "room").locks.first { $0.lockName == "desk" }
            #expect(desk?.owner == "Paused")
            await #expect(throws: SwitchboardClientError(code: .lockHeld)) {
                try await observer.acquireLock(channel: "room", name: "desk")
            }
            for client in [paused, back, watcher, observer] { await client.close() }
        }
    }

    @Test("a node paused inside a transaction holds up another node's write of the same set only until PostgreSQL ends its idle transaction (a quarter of the node timeout)")
    func aNodePausedInsideATransactionReleasesItsLocksSoon() async throws {
        try await ClusterProcessTests.withNodes(2, arguments: ["--shutdown-grace-ms", "2000"]) { postgres, nodes in
            // The node timeout is 10 s: PostgreSQL ends a transaction idle for 2.5 s; a lock is waited for 7.5 s.
            try await Self.slowWrites(of: "slow", sleepSeconds: 1.5, in: postgres)
            let first = try await nodes[0].client("First")
            let second = try await nodes[1].client("Second")
            try await second.setChannelMetadata(channel: "room", items: [MetadataItem(key: "start", value: "1")])
            let slowWrite = Task { try await first.setChannelMetadata(channel: "room", items: [MetadataItem(key: "slow", value: "1")]) }
            #expect(try await eventually(seconds: 10) { try await Self.sleepingBackends(in: postgres) == 1 })
            nodes[0].process.signal(SIGSTOP)

            // The paused node's transaction holds the set's row until PostgreSQL ends it, 2.5 s after its statement ended.
            let started = ContinuousClock.now
            try await second.setChannelMetadata(channel: "room", items: [MetadataItem(key: "fast", value: "1")])
            let waited = ContinuousClock.now - started
            #expect(waited < .seconds(6), "the write waited \(waited) for the paused node's transaction")

            // Swept, then resumed: it fences itself, and its write was never committed.
            #expect(try await eventually(seconds: 25) { try await postgres.psql("SELECT count(*) FROM sb_node") == "1" })
            nodes[0].process.signal(SIGCONT)
            #expect(await nodes[0].process.waitForExit(seconds: 15) == 75)
            #expect((try? await slowWrite.value) == nil)
            #expect(try await postgres.psql("SELECT count(*) FROM sb_metadata_item WHERE key = 'slow'::bytea") == "0")
            let items = try await second.getChannelMetadata(channel: "room").items.map(\.key)
            #expect(Set(items) == ["start", "fast"])
            await first.close()
            await second.close()
        }
    }

    @Test("the node that sweeps a dead node ends the dead node's database sessions, so a statement it left running holds no lock")
    func sweepingADeadNodeEndsItsDatabaseSessions() async throws {
        try await ClusterProcessTests.withNodes(2, arguments: ["--shutdown-grace-ms", "2000"]) { postgres, nodes in
            // A statement that runs for a minute: PostgreSQL's idle-in-transaction bound does not end it.
            try await Self.slowWrites(of: "stuck", sleepSeconds: 60, in: postgres)
            let first = try await nodes[0].client("First")
            let second = try await nodes[1].client("Second")
            try await second.setChannelMetadata(channel: "room", items: [MetadataItem(key: "start", value: "1")])
            let stuckWrite = Task { try await first.setChannelMetadata(channel: "room", items: [MetadataItem(key: "stuck", value: "1")]) }
            #expect(try await eventually(seconds: 10) { try await Self.sleepingBackends(in: postgres) == 1 })
            let pausedNode = try await postgres.psql(
                "SELECT substring(application_name FROM '[^-]*$') FROM pg_stat_activity WHERE wait_event = 'PgSleep'")
            nodes[0].process.signal(SIGSTOP)

            #expect(try await eventually(seconds: 25) { try await postgres.psql("SELECT count(*) FROM sb_node") == "1" })
            let ended = try await eventually(seconds: 5) {
                try await postgres.psql(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'switchboard-%-\(pausedNode)'") == "0"
            }
            #expect(ended, "the dead node \(pausedNode) still has database sessions")
            // The set's row is free again: a write through the live node goes through (one that waited on the dead
            // node's lock before the sweep may have failed with 8001).
            let written = try await eventually(seconds: 10) {
                (try? await second.setChannelMetadata(channel: "room", items: [MetadataItem(key: "fast", value: "1")])) != nil
            }
            #expect(written)

            nodes[0].process.signal(SIGCONT)
            #expect(await nodes[0].process.waitForExit(seconds: 15) == 75)
            #expect((try? await stuckWrite.value) == nil)
            #expect(try await postgres.psql("SELECT count(*) FROM sb_metadata_item WHERE key = 'stuck'::bytea") == "0")
            await first.close()
            await second.close()
        }
    }

    @Test("a node whose PostgreSQL stops answering fences itself after the node timeout and exits with 75 within the drain grace + 5 s")
    func aNodeCutOffFromItsDatabaseExitsWithinTheBound() async throws {
        try await ClusterProcessTests.withNodes(1, arguments: Self.shortTimeouts) { postgres, nodes in
            let client = try await nodes[0].client("Tony")
            try await client.subscribeChannel(channel: "room")
            try await client.setChannelMetadata(channel: "room", items: [MetadataItem(key: "k", value: "v")])
            try await Task.sleep(for: .seconds(1))  // a heartbeat and a presence write went through
            Self.signalPostgres(postgres, SIGSTOP)
            defer { Self.signalPostgres(postgres, SIGCONT) }
            let stopped = ContinuousClock.now
            // Writes wait on the database meanwhile (this one may never be answered before the node goes).
            let pending = Task { try await client.setChannelMetadata(channel: "room", items: [MetadataItem(key: "k", value: "w")]) }
            // Node timeout 7 s, then the drain (2 s) and at most 5 s more.
            let status = await nodes[0].process.waitForExit(seconds: 30)
            let after = ContinuousClock.now - stopped
            #expect(status == 75, "exit status \(status.map(String.init) ?? "none: still running")")
            #expect(after < .seconds(7 + 1 + 2 + 5 + 3), "the node exited \(after) after its database stopped answering")
            #expect(!client.state.isConnected)
            pending.cancel()
            await client.close()
        }
    }

    @Test("a fenced node ends at once (75), and a second SIGTERM ends a node stuck in its shutdown at once (130)")
    func signalsEndAStuckNodeAtOnce() async throws {
        // A drain grace of a minute: neither node would be done by itself within the checks' bounds.
        try await ClusterProcessTests.withNodes(2, arguments: ["--presence-timeout", "8", "--shutdown-grace-ms", "60000"]) {
            postgres, nodes in
            let client = try await nodes[0].client("Tony")
            try await client.subscribeChannel(channel: "room")
            let lingering = try await nodes[1].client("Lingering")
            try await Task.sleep(for: .seconds(1))
            Self.signalPostgres(postgres, SIGSTOP)
            defer { Self.signalPostgres(postgres, SIGCONT) }

            // Node 1: SIGTERM before the node timeout; its client stays, so its drain waits, and then its writers wait
            // on the database.
            nodes[1].process.signal(SIGTERM)
            try await Task.sleep(for: .seconds(2))
            #expect(nodes[1].process.isRunning, "the node stopped by itself: nothing to check")
            nodes[1].process.signal(SIGTERM)
            #expect(await nodes[1].process.waitForExit(seconds: 3) == 130)

            // Node 0 fences itself (7 s): its client is sent away, and it stops with 75. A fenced node waits for no
            // database connection (PostgresPool refuses it at once), so it may have ended by itself already; if not, a
            // SIGTERM ends it at once.
            #expect(try await eventually(seconds: 20) { !client.state.isConnected })
            try await Task.sleep(for: .seconds(1))
            if nodes[0].process.isRunning { nodes[0].process.signal(SIGTERM) }
            #expect(await nodes[0].process.waitForExit(seconds: 3) == 75)
            await client.close()
            await lingering.close()
        }
    }

    // MARK: Helpers

    /// The users `client` sees in `channel`, sorted.
    static func members(of channel: String, by client: SwitchboardClient) async throws -> [String] {
        try await client.whoNow(channel: channel).users.map(\.userId).sorted()
    }

    /// Makes every write of the metadata item `key` sleep `sleepSeconds` inside its transaction (a trigger).
    static func slowWrites(of key: String, sleepSeconds: Double, in postgres: TestPostgres) async throws {
        try await postgres.psql(
            """
            CREATE FUNCTION sb_test_slow() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.key = '\(key)'::bytea THEN PERFORM pg_sleep(\(sleepSeconds)); END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER sb_test_slow BEFORE INSERT OR UPDATE ON sb_metadata_item
                FOR EACH ROW EXECUTE FUNCTION sb_test_slow();
            """)
    }

    /// How many database sessions are inside `pg_sleep` (a slowed write).
    static func sleepingBackends(in postgres: TestPostgres) async throws -> Int {
        Int(try await postgres.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'")) ?? -1
    }

    /// Sends `signal` to the PostgreSQL server and every process of it (SIGSTOP: it stops answering, connections stay).
    static func signalPostgres(_ postgres: TestPostgres, _ signal: Int32) {
        let server = postgres.server.pid
        var pids: [pid_t] = [server]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = pid_t(entry),
                let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            // After the command in parentheses: state, then the parent's pid.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, pid_t(fields[1]) == server { pids.append(pid) }
        }
        for pid in pids { kill(pid, signal) }
    }
}
