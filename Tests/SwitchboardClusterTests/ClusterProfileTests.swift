import Foundation
import NIOCore
import SwitchboardClient
@testable import SwitchboardCluster
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// The profile directory and its providers across the nodes of a cluster sharing one PostgreSQL database, over real
/// sockets: whichever node a client is on, it reads what any node wrote, gets the changes it subscribed to, and a
/// provider connected to one node answers the misses of every node (`Protocol/SPEC.md` §13.5).
@Suite("Cluster profiles", .serialized, .timeLimit(.minutes(3)))
struct ClusterProfileTests {
    @Test("every profile feed row decodes to what was encoded, and a cut one is refused")
    func profileFeedRowsRoundTrip() throws {
        let messages: [ProfileFeedMessage] = [
            .change(.user(UserInfo(userId: "u", name: "N\u{0}é", portraitUri: "p", extra: "x", updatedAtMs: .max))),
            .change(.group(GroupInfo(groupId: "g", name: "G", updatedAtMs: 1))),
            .change(.member(GroupMemberInfo(groupId: "g", userId: "u", nickname: "n", extra: "e", updatedAtMs: 2))),
            .change(.removeUsers(["a", "b"])), .change(.removeUsers(nil)), .change(.removeGroups([])),
            .change(.removeMembers([(group: "g", user: "u"), (group: "h", user: "v")])), .change(.removeMembers(nil)),
            .change(.memberList(group: "g", members: ["a", "", "c"])), .change(.removeMemberLists(nil)),
            .providers(node: "n1", kinds: [.user, .memberList], present: true),
            .providers(node: "n1", kinds: [.group], present: false),
            .request(to: "n2", from: "n1", ProviderRequest(providerRequestId: 42, kind: .groupMember, id: "g", memberUserId: "u")),
            .answered(to: "n1", askID: .max),
        ]
        for (index, message) in messages.enumerated() {
            let encoded = ProfileFeedCoding.encode(message, version: Int64(index) + 1)
            let (version, decoded) = try ProfileFeedCoding.decode(encoded)
            #expect(version == Int64(index) + 1)
            #expect(ProfileFeedCoding.encode(decoded, version: version) == encoded, "message \(index)")
            if encoded.readableBytes > 10 {
                #expect(throws: (any Error).self) { try ProfileFeedCoding.decode(encoded.getSlice(at: 0, length: encoded.readableBytes - 1)!) }
            }
        }
    }

    @Test("a profile written on one node is read on the others, and its changes reach a subscriber on another node")
    func aProfileWrittenOnOneNodeIsReadAndPushedOnTheOthers() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let changes = PushCollector(watcher.makeProfileChangeStream())
            try await watcher.subscribeProfiles(userIDs: ["Tony"], groupIDs: ["crew"])

            let tony = try await nodes[0].client("Tony")
            try await tony.setUserInfo(UserInfo(userId: "Tony", name: "Tony S", extra: "pilot"))
            let set = try #require(await changes.next(seconds: 5), "no profile change on the other node")
            #expect(set.kind == .user && set.id == "Tony" && !set.removed && set.user?.name == "Tony S")

            let ana = try await nodes[2].client("Ana")
            let settled = try await eventually {
                let read = try await ana.getUserInfo(userIDs: ["Tony"])
                return read.users.map(\.name) == ["Tony S"] && read.users.first?.updatedAtMs == set.user?.updatedAtMs
            }
            #expect(settled)

            let listed = try await tony.updateGroupMembers(groupID: "crew", add: ["Tony", "Ana", "Bob"])
            #expect(listed.memberCount == 3)
            let list = try #require(await changes.next(seconds: 5), "no member list change on the other node")
            #expect(list.kind == .memberList && list.id == "crew" && list.memberCount == 3)
            _ = try await ana.updateGroupMembers(groupID: "crew", remove: ["Bob"])
            let shrunk = try #require(await changes.next(seconds: 5))
            #expect(shrunk.kind == .memberList && shrunk.memberCount == 2)
            let settled2 = try await eventually {
                let page = try await tony.getGroupMembers(groupID: "crew")
                return page.userIds == ["Ana", "Tony"] && page.totalMembers == 2
            }
            #expect(settled2)

            // Cleared on the third node: gone on the first, and the subscriber on the second is told.
            #expect(try await ana.clearProfile(kind: .user, id: "Tony").removed == 1)
            let cleared = try #require(await changes.next(seconds: 5), "no removal on the other node")
            #expect(cleared.kind == .user && cleared.id == "Tony" && cleared.removed)
            let settled3 = try await eventually { try await tony.getUserInfo(userIDs: ["Tony"]).missing == ["Tony"] }
            #expect(settled3)
            for client in [watcher, tony, ana] { await client.close() }
        }
    }

    @Test("a provider connected to one node answers a miss asked on another, and the answer is stored for every node")
    func aProviderOnOneNodeAnswersAMissOnAnother() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            let provider = try await nodes[0].client("Directory")
            let requests = PushCollector(provider.makeProviderRequestStream())
            let answering = Task {
                while let request = await requests.next(seconds: 60) {
                    switch request.kind {
                    case .user:
                        try await provider.answerProvider(
                            request, with: .user(UserInfo(userId: request.id, name: "provided \(request.id)")))
                    case .memberList:
                        try await provider.answerProvider(request, with: .memberList(["m1", "m2", "m3"]))
                    default:
                        try await provider.answerProvider(request, with: .notFound)
                    }
                }
            }
            defer { answering.cancel() }
            try await provider.registerProvider(kinds: [.user, .memberList])

            // The third node watches the record, to know when the provided record reached it.
            let watcher = try await nodes[2].client("Watcher")
            let changes = PushCollector(watcher.makeProfileChangeStream())
            try await watcher.subscribeProfiles(userIDs: ["Ghost"], groupIDs: ["ghosts"])

            let asker = try await nodes[1].client("Asker")
            // Until the registration reached the second node it answers the miss itself (no provider known).
            let settled4 = try await eventually {
                try await asker.getUserInfo(userIDs: ["Ghost"]).users.map(\.name) == ["provided Ghost"]
            }
            #expect(settled4)
            let page = try await asker.getGroupMembers(groupID: "ghosts")
            #expect(page.userIds == ["m1", "m2", "m3"] && page.totalMembers == 3)
            #expect(requests.taken == 2, "the provider was asked \(requests.taken) times")

            // Stored: the third node has the record and the list, and reads them without asking again.
            let stored = try #require(await changes.next(seconds: 5), "the provided record did not reach the third node")
            #expect(stored.kind == .user && stored.user?.name == "provided Ghost")
            let storedList = try #require(await changes.next(seconds: 5))
            #expect(storedList.kind == .memberList && storedList.memberCount == 3)
            #expect(try await watcher.getUserInfo(userIDs: ["Ghost"]).users.map(\.name) == ["provided Ghost"])
            #expect(try await watcher.getGroupMembers(groupID: "ghosts").totalMembers == 3)
            #expect(requests.taken == 2, "the provider was asked \(requests.taken) times")
            for client in [provider, watcher, asker] { await client.close() }
        }
    }

    @Test("a provider registered through one node is asked by a read through another node as soon as the registration is answered")
    func aRegistrationIsKnownToAReadThroughAnotherNodeAtOnce() async throws {
        try await withCluster(nodes: 3) { postgres, nodes in
            let readers = [try await nodes[1].client("Reader"), try await nodes[2].client("Reader")]
            for round in 0..<6 {
                let provider = try await nodes[0].client("Directory")
                let requests = PushCollector(provider.makeProviderRequestStream())
                let answering = Task {
                    while let request = await requests.next(seconds: 60) {
                        try await provider.answerProvider(
                            request, with: .user(UserInfo(userId: request.id, name: "provided in round \(round)")))
                    }
                }
                try await provider.registerProvider(kinds: [.user])
                // At once, through another node.
                let reader = readers[round % 2]
                let read = try await reader.getUserInfo(userIDs: ["Someone\(round)"])
                #expect(
                    read.users.map(\.name) == ["provided in round \(round)"] && requests.taken == 1,
                    "round \(round): read \(read.users.map(\.name)), missing \(read.missing); the provider was asked \(requests.taken) times")
                answering.cancel()
                await provider.close()
                // The registration is gone before the next round registers again.
                let gone = try await eventually(seconds: 10) {
                    try await postgres.psql("SELECT count(*) FROM sb_profile_provider") == "0"
                }
                #expect(gone)
                // And every node read its removal (the feed is read every 100 ms at the latest).
                try await Task.sleep(for: .milliseconds(300))
            }
            for client in readers { await client.close() }
        }
    }

    @Test("with no provider on any node a miss is answered at once, and a provider whose session ended is not waited for")
    func withNoProviderAMissIsAnsweredAtOnce() async throws {
        try await withCluster(nodes: 2) { postgres, nodes in
            let asker = try await nodes[1].client("Asker")
            let clock = ContinuousClock()
            let started = clock.now
            #expect(try await asker.getUserInfo(userIDs: ["Nobody"]).missing == ["Nobody"])
            #expect(clock.now - started < .seconds(4))  // not after the 5 s provider timeout
            do {
                let page = try await asker.getGroupMembers(groupID: "nowhere")
                Issue.record("a member list nobody holds was read: \(page)")
            } catch let error as SwitchboardClientError {
                #expect(error.code == .profileNotFound, "\(error)")
            }

            // A provider on the first node answers, then goes away: reads on the second node are answered at once
            // again, not after the provider timeout.
            let provider = try await nodes[0].client("Directory")
            let requests = PushCollector(provider.makeProviderRequestStream())
            try await provider.registerProvider(kinds: [.user])
            let answering = Task {
                while let request = await requests.next(seconds: 60) {
                    try await provider.answerProvider(request, with: .notFound)
                }
            }
            let settled5 = try await eventually {
                let missing = try await asker.getUserInfo(userIDs: ["Unknown\(requests.taken)"]).missing
                return requests.taken > 0 && missing.count == 1
            }
            #expect(settled5)
            answering.cancel()
            await provider.close()
            let settled6 = try await eventually {
                let started = clock.now
                return try await asker.getUserInfo(userIDs: ["Later"]).missing == ["Later"]
                    && clock.now - started < .seconds(1)
            }
            #expect(settled6)
            let settled7 = try await eventually { try await postgres.psql("SELECT count(*) FROM sb_profile_provider") == "0" }
            #expect(settled7)
            await asker.close()
        }
    }

    @Test("a provider on a node that stopped heart-beating is no longer asked once the node is swept")
    func aProviderOnADeadNodeIsNoLongerAsked() async throws {
        try await withCluster(nodes: 2) { postgres, nodes in
            // A node that provides user records and then dies: its heartbeat stops now.
            let registration = ProfileFeedCoding.encode(.providers(node: "ghost", kinds: [.user], present: true), version: 0)
            let hex = registration.readableBytesView.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
            _ = try await postgres.psql(
                """
                INSERT INTO sb_node (id, started_at, heartbeat_at) VALUES ('ghost', now(), now());
                INSERT INTO sb_profile_provider (kind, node) VALUES (1, 'ghost')
                    ON CONFLICT (kind) DO UPDATE SET node = EXCLUDED.node;
                INSERT INTO sb_outbox (node, kind, payload) VALUES ('ghost', 5, decode('\(hex)', 'hex'));
                NOTIFY sb_outbox;
                """)
            let asker = try await nodes[1].client("Asker")
            let clock = ContinuousClock()
            // While the node is registered, a miss is asked of it and waits for the provider timeout.
            let asked = Atomic<Int>(0)
            let settled8 = try await eventually(seconds: 15) {
                let id = "Ghost\(asked.add(1, ordering: .relaxed).newValue)"
                let started = clock.now
                let missing = try await asker.getUserInfo(userIDs: [id]).missing
                return missing == [id] && clock.now - started >= .seconds(4)
            }
            #expect(settled8)
            // Once a live node swept it (its heartbeat is older than the node timeout), misses are answered at once.
            let settled9 = try await eventually(seconds: 20) {
                let id = "Ghost\(asked.add(1, ordering: .relaxed).newValue)"
                let started = clock.now
                let missing = try await asker.getUserInfo(userIDs: [id]).missing
                return missing == [id] && clock.now - started < .seconds(1)
            }
            #expect(settled9)
            #expect(try await postgres.psql("SELECT count(*) FROM sb_profile_provider WHERE node = 'ghost'") == "0")
            await asker.close()
        }
    }

    @Test("the latest provider registration of a kind wins across nodes: the node whose provider it replaced asks the new one")
    func theLatestRegistrationWinsAcrossNodes() async throws {
        try await withCluster(nodes: 3) { postgres, nodes in
            let first = try await nodes[0].client("First")
            let second = try await nodes[1].client("Second")
            let answering = [(first, "first"), (second, "second")].map { provider, name in
                let requests = PushCollector(provider.makeProviderRequestStream())
                return Task {
                    while let request = await requests.next(seconds: 60) {
                        try await provider.answerProvider(request, with: .user(UserInfo(userId: request.id, name: "\(name) \(request.id)")))
                    }
                }
            }
            defer { for task in answering { task.cancel() } }
            let asker = try await nodes[2].client("Asker")
            let onFirst = try await nodes[0].client("Reader")
            let ids = Atomic<Int>(0)
            @Sendable func provided(by client: SwitchboardClient) async throws -> String? {
                let id = "u\(ids.add(1, ordering: .relaxed).newValue)"
                return try await client.getUserInfo(userIDs: [id]).users.first?.name.split(separator: " ").first.map(String.init)
            }
            try await first.registerProvider(kinds: [.user])
            let settled10 = try await eventually { try await provided(by: asker) == "first" }
            #expect(settled10)
            try await second.registerProvider(kinds: [.user])
            let settled11 = try await eventually { try await provided(by: asker) == "second" }
            #expect(settled11)
            let settled12 = try await eventually { try await provided(by: onFirst) == "second" }
            #expect(settled12)
            #expect(try await postgres.psql("SELECT node FROM sb_profile_provider WHERE kind = 1") == nodes[1].engine.nodeID)
            for client in [first, second, asker, onFirst] { await client.close() }
        }
    }

    @Test("concurrent writes of one record through two nodes leave every node with the record as committed")
    func concurrentWritesOfOneRecordConverge() async throws {
        try await withCluster(nodes: 3) { postgres, nodes in
            let writers = [try await nodes[0].client("Tony"), try await nodes[1].client("Tony")]
            for round in 0..<20 {
                await withTaskGroup(of: Void.self) { group in
                    for (index, writer) in writers.enumerated() {
                        group.addTask { try? await writer.setUserInfo(UserInfo(userId: "Tony", name: "r\(round)-\(index)")) }
                    }
                }
            }
            let committed = try await postgres.psql(
                "SELECT convert_from(name, 'UTF8') FROM sb_profile_user WHERE user_id = convert_to('Tony', 'UTF8')")
            #expect(committed.hasPrefix("r19-"))
            let readers = [writers[0], writers[1], try await nodes[2].client("Ana")]
            for (index, reader) in readers.enumerated() {
                let settled13 = try await eventually { try await reader.getUserInfo(userIDs: ["Tony"]).users.first?.name == committed }
                #expect(settled13, "node \(index) does not hold the committed record")
            }
            for client in readers { await client.close() }
        }
    }

    @Test("concurrent member list changes through two nodes are all applied, and every node holds the list as committed")
    func concurrentMemberListChangesConverge() async throws {
        try await withCluster(nodes: 3) { postgres, nodes in
            let writers = [try await nodes[0].client("Admin0"), try await nodes[1].client("Admin1")]
            for round in 0..<20 {
                await withTaskGroup(of: Void.self) { group in
                    for (index, writer) in writers.enumerated() {
                        group.addTask { _ = try? await writer.updateGroupMembers(groupID: "crew", add: ["n\(index)-\(round)"]) }
                    }
                }
            }
            let committed = try await postgres.psql(
                "SELECT count(*) FROM sb_profile_member_entry WHERE group_id = convert_to('crew', 'UTF8')")
            #expect(committed == "40")
            let readers = writers + [try await nodes[2].client("Ana")]
            for (index, reader) in readers.enumerated() {
                let settled14 = try await eventually { try await reader.getGroupMembers(groupID: "crew", limit: 500).totalMembers == 40 }
                #expect(settled14, "node \(index) does not hold the committed list")
            }
            for client in readers { await client.close() }
        }
    }

    @Test("a profile write after the database closed the node's pooled connections is committed, not refused")
    func aWriteAfterTheWriterConnectionWasClosedIsCommitted() async throws {
        try await withCluster(nodes: 2) { postgres, nodes in
            let tony = try await nodes[0].client("Tony")
            try await tony.setUserInfo(UserInfo(userId: "Tony", name: "first"))
            let killed = try await postgres.psql(
                """
                SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE application_name = 'switchboard-node-\(nodes[0].engine.nodeID)'
                """)
            #expect((Int(killed) ?? 0) >= 1, "\(killed)")
            try await tony.setUserInfo(UserInfo(userId: "Tony", name: "second"))
            let reader = try await nodes[1].client("Reader")
            let settled15 = try await eventually { try await reader.getUserInfo(userIDs: ["Tony"]).users.map(\.name) == ["second"] }
            #expect(settled15)
            for client in [tony, reader] { await client.close() }
        }
    }

    @Test("a profile write whose connection is lost within its transaction is tried again on a new one and committed")
    func aWriteWhoseConnectionIsLostIsTriedAgain() async throws {
        try await withCluster(nodes: 2) { postgres, nodes in
            // The first transaction that writes the user "doomed" loses its connection (a sequence is not rolled back).
            _ = try await postgres.psql(
                """
                CREATE SEQUENCE doomed_once;
                CREATE FUNCTION doom() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW.user_id = convert_to('doomed', 'UTF8') AND nextval('doomed_once') = 1 THEN
                        PERFORM pg_terminate_backend(pg_backend_pid());
                    END IF;
                    RETURN NEW;
                END $$;
                CREATE TRIGGER doom BEFORE INSERT ON sb_profile_user FOR EACH ROW EXECUTE FUNCTION doom();
                """)
            let writer = try await nodes[0].client("doomed")
            try await writer.setUserInfo(UserInfo(userId: "doomed", name: "still here"))
            #expect(try await postgres.psql("SELECT last_value FROM doomed_once") == "2")
            let reader = try await nodes[1].client("Reader")
            let settled16 = try await eventually { try await reader.getUserInfo(userIDs: ["doomed"]).users.map(\.name) == ["still here"] }
            #expect(settled16)
            for client in [writer, reader] { await client.close() }
        }
    }

    @Test("a refused write is undone, and the node then holds what another node committed of the record meanwhile")
    func aRefusedWriteLeavesTheNodeWithTheCommittedRecord() async throws {
        try await withCluster(nodes: 2) { postgres, nodes in
            let first = try await nodes[0].client("Tony")
            let second = try await nodes[1].client("Tony")
            try await first.setUserInfo(UserInfo(userId: "Tony", name: "original"))
            let settled17 = try await eventually { try await second.getUserInfo(userIDs: ["Tony"]).users.first?.name == "original" }
            #expect(settled17)
            // The database refuses the name "refused", after a pause in which the other node's write commits.
            _ = try await postgres.psql(
                """
                CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW.name = convert_to('refused', 'UTF8') THEN
                        PERFORM pg_sleep(1.5);
                        RAISE EXCEPTION 'refused';
                    END IF;
                    RETURN NEW;
                END $$;
                CREATE TRIGGER refuse BEFORE INSERT ON sb_profile_user FOR EACH ROW EXECUTE FUNCTION refuse();
                """)
            let refused = Task { () -> ErrorCode? in
                do {
                    try await first.setUserInfo(UserInfo(userId: "Tony", name: "refused"))
                    return nil
                } catch let error as SwitchboardClientError {
                    return error.code
                }
            }
            let settled18 = try await eventually {
                try await postgres.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'") == "1"
            }
            #expect(settled18)
            try await second.setUserInfo(UserInfo(userId: "Tony", name: "meanwhile"))
            #expect(try await refused.value == .storageFailure)
            let settled19 = try await eventually { try await first.getUserInfo(userIDs: ["Tony"]).users.first?.name == "meanwhile" }
            #expect(settled19)
            #expect(try await second.getUserInfo(userIDs: ["Tony"]).users.first?.name == "meanwhile")
            for client in [first, second] { await client.close() }
        }
    }

    @Test("a burst of writes through one node, several of them of one record, is committed and read alike on every node")
    func aBurstOfWritesIsReadAlikeOnEveryNode() async throws {
        try await withCluster(nodes: 2) { postgres, nodes in
            var writers: [SwitchboardClient] = []
            for index in 0..<8 { writers.append(try await nodes[0].client("admin\(index)")) }
            let clients = writers
            // Every writer sets ten users and the same member record, all at once: the node batches them.
            let failures = await withTaskGroup(of: Int.self) { group in
                for (index, writer) in clients.enumerated() {
                    group.addTask {
                        var failed = 0
                        for user in 0..<10 {
                            do {
                                try await writer.setUserInfo(UserInfo(userId: "u\(user)", name: "w\(index)"))
                                try await writer.setGroupMemberInfo(GroupMemberInfo(groupId: "g", userId: "shared", nickname: "w\(index)"))
                            } catch {
                                failed += 1
                            }
                        }
                        return failed
                    }
                }
                return await group.reduce(0, +)
            }
            #expect(failures == 0)
            let reader = try await nodes[1].client("Reader")
            let ids = (0..<10).map { "u\($0)" }
            let committed = try await postgres.psql(
                "SELECT string_agg(convert_from(name, 'UTF8'), ',' ORDER BY user_id) FROM sb_profile_user")
            let nickname = try await postgres.psql("SELECT convert_from(nickname, 'UTF8') FROM sb_profile_member")
            for client in [clients[0], reader] {
                let settled20 = try await eventually {
                    let users = try await client.getUserInfo(userIDs: ids).users.sorted { $0.userId < $1.userId }
                    let member = try await client.getGroupMemberInfo(groupID: "g", userIDs: ["shared"]).members
                    return users.map(\.name).joined(separator: ",") == committed && member.map(\.nickname) == [nickname]
                }
                #expect(settled20)
            }
            for client in clients + [reader] { await client.close() }
        }
    }

    @Test("a node started later loads the directory, and a node that stops removes its provider registration")
    func aNodeStartedLaterLoadsTheDirectory() async throws {
        let postgres = try await TestPostgres.start()
        do {
            try await withCluster(nodes: 1, postgres: postgres) { postgres, nodes in
                let admin = try await nodes[0].client("Admin")
                try await admin.setUserInfo(UserInfo(userId: "Tony", name: "Tony S"))
                try await admin.setGroupInfo(GroupInfo(groupId: "crew", name: "Crew"))
                try await admin.setGroupMemberInfo(GroupMemberInfo(groupId: "crew", userId: "Tony", nickname: "T"))
                try await admin.updateGroupMembers(groupID: "crew", add: ["Tony", "Ana"])
                try await admin.registerProvider(kinds: [.group])
                let settled21 = try await eventually { try await postgres.psql("SELECT count(*) FROM sb_profile_provider") == "1" }
                #expect(settled21)
            }
            #expect(try await postgres.psql("SELECT count(*) FROM sb_profile_provider") == "0")
            try await withCluster(nodes: 2, postgres: postgres) { _, nodes in
                let reader = try await nodes[1].client("Reader")
                #expect(try await reader.getUserInfo(userIDs: ["Tony"]).users.map(\.name) == ["Tony S"])
                #expect(try await reader.getGroupInfo(groupIDs: ["crew"]).groups.map(\.name) == ["Crew"])
                #expect(
                    try await reader.getGroupMemberInfo(groupID: "crew", userIDs: ["Tony"]).members.map(\.nickname) == ["T"])
                #expect(try await reader.getGroupMembers(groupID: "crew").userIds == ["Ana", "Tony"])
                // No provider registration survived: a miss is answered at once.
                #expect(try await reader.getGroupInfo(groupIDs: ["other"]).missing == ["other"])
                await reader.close()
            }
        } catch {
            await postgres.stop()
            throw error
        }
        await postgres.stop()
    }

    @Test("a node that starts while a provider is registered on another node asks that provider from its first read")
    func aNodeStartedLaterAsksAProviderRegisteredBefore() async throws {
        let postgres = try await TestPostgres.start()
        do {
            try await withCluster(nodes: 1, postgres: postgres) { postgres, nodes in
                let provider = try await nodes[0].client("Directory")
                let requests = PushCollector(provider.makeProviderRequestStream())
                let answering = Task {
                    while let request = await requests.next(seconds: 60) {
                        try await provider.answerProvider(request, with: .memberList(["a", "b"]))
                    }
                }
                defer { answering.cancel() }
                try await provider.registerProvider(kinds: [.memberList])
                let settled22 = try await eventually { try await postgres.psql("SELECT count(*) FROM sb_profile_provider") == "1" }
                #expect(settled22)
                let settled23 = try await eventually { try await postgres.psql("SELECT count(*) FROM sb_node") == "1" }
                #expect(settled23)
                // A second node joins the running one.
                try await withCluster(nodes: 1, postgres: postgres) { _, later in
                    let reader = try await later[0].client("Reader")
                    #expect(try await reader.getGroupMembers(groupID: "crew").userIds == ["a", "b"])
                    #expect(requests.taken == 1)
                    await reader.close()
                }
                await provider.close()
            }
        } catch {
            await postgres.stop()
            throw error
        }
        await postgres.stop()
    }

    @Test("a node that starts ignores a provider registration left by a node that is gone")
    func aRegistrationOfAGoneNodeIsIgnoredAtStart() async throws {
        let postgres = try await TestPostgres.start()
        do {
            try await withCluster(nodes: 1, postgres: postgres) { postgres, _ in
                _ = try await postgres.psql("INSERT INTO sb_profile_provider (kind, node) VALUES (1, 'left')")
                try await withCluster(nodes: 1, postgres: postgres) { _, later in
                    let reader = try await later[0].client("Reader")
                    let clock = ContinuousClock()
                    let started = clock.now
                    #expect(try await reader.getUserInfo(userIDs: ["x"]).missing == ["x"])
                    #expect(clock.now - started < .seconds(4), "the read waited for a provider nobody runs (5 s timeout)")
                    await reader.close()
                }
            }
        } catch {
            await postgres.stop()
            throw error
        }
        await postgres.stop()
    }

    @Test("a provider on a node killed with kill -9 is no longer asked once the other nodes see the node dead")
    func aProviderOnAKilledNodeIsNoLongerAsked() async throws {
        try await ClusterProcessTests.withNodes(3) { postgres, nodes in
            let provider = try await nodes[0].client("Directory")
            let requests = PushCollector(provider.makeProviderRequestStream())
            let answering = Task {
                while let request = await requests.next(seconds: 60) {
                    try? await provider.answerProvider(request, with: .user(UserInfo(userId: request.id, name: "provided")))
                }
            }
            defer { answering.cancel() }
            try await provider.registerProvider(kinds: [.user])
            let asker = try await nodes[2].client("Asker")
            let ids = Atomic<Int>(0)
            let settled24 = try await eventually(seconds: 20) {
                let id = "u\(ids.add(1, ordering: .relaxed).newValue)"
                return try await asker.getUserInfo(userIDs: [id]).users.map(\.name) == ["provided"]
            }
            #expect(settled24)
            nodes[0].process.signal(SIGKILL)
            _ = await nodes[0].process.waitForExit()
            let clock = ContinuousClock()
            let settled25 = try await eventually(seconds: 30) {
                let id = "u\(ids.add(1, ordering: .relaxed).newValue)"
                let started = clock.now
                return try await asker.getUserInfo(userIDs: [id]).missing == [id] && clock.now - started < .seconds(1)
            }
            #expect(settled25)
            #expect(try await postgres.psql("SELECT count(*) FROM sb_profile_provider") == "0")
            await asker.close()
        }
    }
}
