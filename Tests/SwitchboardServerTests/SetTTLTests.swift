import Foundation
import GRDB
import SwitchboardClient
import SwitchboardServer
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Set TTLs over real sockets (`Protocol/SPEC.md` SB-13.1-10): a set given `setTtlMs` expires as a whole with one
/// `expired` event (no items, majorRevision 0), reads and compare-and-set see it as gone, ordinary writes keep the TTL,
/// and the deadline survives a killed gateway.
@Suite struct SetTTLTests {
    private static func nowMs() -> UInt64 { UInt64(Date().timeIntervalSince1970 * 1000) }

    @Test(arguments: Transport.allCases)
    func aSubscriberGetsOneExpiredEventWithNoItemsAndMajorRevisionZeroWhenTheSetsTtlEnds(transport: Transport) async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, transport, user: "Tony")
            let watcher = makeClient(gateway, transport, user: "Watcher")
            try await tony.connect()
            try await watcher.connect()
            let events = Recorder(watcher.storageEvents)
            try await watcher.subscribeUserMetadata(userID: "Tony")
            let start = Self.nowMs()
            let written = try await tony.setUserMetadata(
                items: [MetadataItem(key: "status", value: "away"), MetadataItem(key: "name", value: "Tony")],
                options: .expiringSet(after: .milliseconds(300)))
            #expect(written.expiresAtMs >= start + 300 && written.expiresAtMs <= start + 300 + 5_000)
            let set = try #require(await events.first { $0.eventType == .set })
            #expect(set.expiresAtMs == written.expiresAtMs)

            let expired = try #require(await events.first { $0.eventType == .expired })
            #expect(Self.nowMs() >= written.expiresAtMs)
            #expect(expired.target == "Tony" && expired.storageType == .user)
            #expect(expired.items.isEmpty)
            #expect(expired.majorRevision == 0 && expired.expiresAtMs == 0)
            #expect(expired.publisher == "")
            let got = try await watcher.getUserMetadata(userID: "Tony")
            #expect(got.majorRevision == 0 && got.items.isEmpty && got.expiresAtMs == 0)
            // One event, not one per item nor one per sweep; a copy kept from the events is empty.
            try await Task.sleep(for: .milliseconds(200))
            #expect(events.all.filter { $0.eventType == .expired }.count == 1)
            var copy = MetadataSetCopy()
            for event in events.all { copy.apply(event) }
            #expect(copy.items.isEmpty && copy.majorRevision == 0 && copy.expiresAtMs == 0)
            await tony.close()
            await watcher.close()
        }
    }

    @Test(arguments: [ChannelType.message, .stream])
    func channelMembersWithMetadataGetTheSetsExpiryOnEitherChannelType(type: ChannelType) async throws {
        try await withFullGateway { gateway in
            let ana = makeClient(gateway, .tcp, user: "Ana")
            try await ana.connect()
            let events = Recorder(ana.storageEvents)
            try await ana.subscribeChannel(
                channel: "room", type: type, options: ChannelSubscriptionOptions(withMetadata: true))
            _ = try await ana.setChannelMetadata(
                channel: "room", type: type, items: [MetadataItem(key: "topic", value: "x")],
                options: .expiringSet(after: .milliseconds(200)))
            let expired = try #require(await events.first { $0.eventType == .expired })
            #expect(expired.target == "room" && expired.channelType == type && expired.storageType == .channel)
            #expect(expired.items.isEmpty && expired.majorRevision == 0)
            let got = try await ana.getChannelMetadata(channel: "room", type: type)
            #expect(got.items.isEmpty && got.majorRevision == 0)
            await ana.close()
        }
    }

    @Test func anExpiredSetIsGoneForCompareAndSetAndBadSetTtlsAreRefused() async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, .unix, user: "Tony")
            try await tony.connect()
            let events = Recorder(tony.storageEvents)
            try await tony.subscribeUserMetadata()
            _ = try await tony.setUserMetadata(
                items: [MetadataItem(key: "lease", value: "a")], options: .expiringSet(after: .milliseconds(300)))
            _ = await events.first { $0.eventType == .expired }
            let conflict = await expectClientError(.revisionConflict) {
                _ = try await tony.setUserMetadata(
                    items: [MetadataItem(key: "lease", value: "b")], options: MetadataWriteOptions(majorRevision: 1))
            }
            #expect(conflict?.body?.currentRevision == 0)
            await expectClientError(.metadataNotFound) {
                _ = try await tony.updateUserMetadata(items: [MetadataItem(key: "lease", value: "b")])
            }
            await expectClientError(.metadataNotFound) { _ = try await tony.removeUserMetadata() }
            // A create-only write takes the set: above the expiry's revision (1 written, 2 expired), with no TTL.
            let taken = try await tony.setUserMetadata(
                items: [MetadataItem(key: "lease", value: "c")], options: MetadataWriteOptions(majorRevision: 0))
            #expect(taken.majorRevision == 3 && taken.expiresAtMs == 0)
            for bad: Int64 in [-2, 50, 31_536_000_001] {
                let error = await expectClientError(.invalidTtl) {
                    _ = try await tony.setUserMetadata(
                        items: [MetadataItem(key: "k", value: "v")], options: MetadataWriteOptions(setTtlMs: bad))
                }
                #expect(error?.code.rawValue == 7017)
                #expect(error?.body?.key == "")
            }
            await tony.close()
        }
    }

    @Test func aWriteKeepsTheSetsTtlANewSetTtlRefreshesItAndMinusOneClearsIt() async throws {
        try await withFullGateway { gateway in
            let ana = makeClient(gateway, .tcp, user: "Ana")
            try await ana.connect()
            let events = Recorder(ana.storageEvents)
            try await ana.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withMetadata: true))
            let first = try await ana.setChannelMetadata(
                channel: "room", items: [MetadataItem(key: "a", value: "1")],
                options: .expiringSet(after: .seconds(5)))  // 5 s: the next writes come first on a loaded machine too
            let kept = try await ana.updateChannelMetadata(channel: "room", items: [MetadataItem(key: "a", value: "2")])
            #expect(kept.expiresAtMs == first.expiresAtMs && kept.expiresAtMs != 0)
            let refreshed = try await ana.setChannelMetadata(
                channel: "room", items: [MetadataItem(key: "b", value: "1")], options: .expiringSet(after: .seconds(60)))
            #expect(refreshed.expiresAtMs >= first.expiresAtMs + 54_000)
            #expect(try await ana.getChannelMetadata(channel: "room").expiresAtMs == refreshed.expiresAtMs)
            // Past the first deadline the refreshed set still stands, and nothing expired.
            let nowMs = UInt64(Date().timeIntervalSince1970 * 1000)
            if first.expiresAtMs + 300 > nowMs { try await Task.sleep(for: .milliseconds(Int64(first.expiresAtMs + 300 - nowMs))) }
            let got = try await ana.getChannelMetadata(channel: "room")
            #expect(got.items.map(\.key) == ["a", "b"] && got.majorRevision == 3)
            let cleared = try await ana.updateChannelMetadata(
                channel: "room", items: [MetadataItem(key: "b", value: "2")], options: .clearingSetTtl)
            #expect(cleared.expiresAtMs == 0)
            #expect(try await ana.getChannelMetadata(channel: "room").expiresAtMs == 0)
            let update = try #require(await events.first { $0.eventType == .update && $0.majorRevision == 4 })
            #expect(update.expiresAtMs == 0)
            #expect(!events.all.contains { $0.eventType == .expired })
            await ana.close()
        }
    }

    @Test func aResumeFromBeforeASetExpiredAnswersAsForARemovedSet() async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, .unix, user: "Tony")
            let ana = makeClient(gateway, .tcp, user: "Ana")
            try await tony.connect()
            try await ana.connect()
            let first = try await tony.setChannelMetadata(
                channel: "room", items: [MetadataItem(key: "a", value: "1")], options: .expiringSet(after: .milliseconds(300)))
            let events = Recorder(ana.storageEvents)
            try await Task.sleep(for: .milliseconds(600))  // past the deadline: swept, or hidden until it is
            try await ana.subscribeChannel(
                channel: "room", options: ChannelSubscriptionOptions(withMetadata: true, sinceRevision: first.majorRevision))
            let snapshot = try #require(await events.first { $0.eventType == .snapshot })
            #expect(snapshot.resumeFailed && snapshot.resumedFrom == 0)
            #expect(snapshot.majorRevision == 0 && snapshot.items.isEmpty && snapshot.expiresAtMs == 0)
            await tony.close()
            await ana.close()
        }
    }

    @Test func itemTtlsInsideASetWithATtlExpireFirstThenTheSetAsAWhole() async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, .unix, user: "Tony")
            try await tony.connect()
            let events = Recorder(tony.storageEvents)
            try await tony.subscribeUserMetadata()
            let written = try await tony.setUserMetadata(
                items: [.expiring("typing", "yes", after: .milliseconds(200)), MetadataItem(key: "name", value: "Tony")],
                options: .expiringSet(after: .milliseconds(1_500)))
            let expiries = await events.wait { $0.filter { $0.eventType == .expired }.count >= 2 }
                .filter { $0.eventType == .expired }
            #expect(expiries.count == 2)
            #expect(expiries.first?.items.map(\.key) == ["typing"])
            #expect(expiries.first?.majorRevision == 2)
            #expect(expiries.first?.expiresAtMs == written.expiresAtMs)
            #expect(expiries.last?.items.isEmpty == true && expiries.last?.majorRevision == 0)
            let got = try await tony.getUserMetadata()
            #expect(got.majorRevision == 0 && got.items.isEmpty)
            await tony.close()
        }
    }

    @Test func aSetDeadlineSurvivesKillDashNineAndASetDueWhileDownIsSweptAtStart() async throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: ProcessTests.executable.path), "build the switchboard product first")
        let files = ChildGatewayFiles("sb-set-ttl")
        defer { files.remove() }
        let first = try ProcessTests.startGateway(socketPath: files.socket.path, database: files.database.path)
        defer { first.killAndWait() }
        let tony = try await ProcessTests.connectWhenListening(files.socket.path)
        _ = try await tony.login("Tony")
        let soon = SetChannelMetadataRequest(
            channel: "soon", items: [MetadataItem(key: "k", value: "v")], setTtlMs: 300)
        guard case .response(1, .setChannelMetadata(let answered)) = try await DurableLockProcessTests.ask(tony, 1, .setChannelMetadata(soon))
        else {
            Issue.record("the set with a TTL was not acknowledged")
            return
        }
        #expect(answered.expiresAtMs != 0)
        let late = SetChannelMetadataRequest(
            channel: "late", items: [MetadataItem(key: "k", value: "v")], setTtlMs: 600_000)
        guard case .response(2, .setChannelMetadata(let lateAnswer)) = try await DurableLockProcessTests.ask(tony, 2, .setChannelMetadata(late))
        else {
            Issue.record("the long TTL was not acknowledged")
            return
        }
        first.signal(SIGKILL)
        _ = await first.waitForExit()
        try await Task.sleep(for: .milliseconds(500))  // "soon" passes its deadline while no gateway runs

        unlink(files.socket.path)
        let second = try ProcessTests.startGateway(socketPath: files.socket.path, database: files.database.path)
        defer { second.killAndWait() }
        let ann = try await ProcessTests.connectWhenListening(files.socket.path)
        _ = try await ann.login("Ann")
        guard case .response(1, .getChannelMetadata(let gone)) = try await DurableLockProcessTests.ask(
            ann, 1, .getChannelMetadata(GetChannelMetadataRequest(channel: "soon")))
        else {
            Issue.record("no answer to the get after the restart")
            return
        }
        #expect(gone.majorRevision == 0 && gone.items.isEmpty)
        guard case .response(2, .getChannelMetadata(let kept)) = try await DurableLockProcessTests.ask(
            ann, 2, .getChannelMetadata(GetChannelMetadataRequest(channel: "late")))
        else {
            Issue.record("no answer to the second get")
            return
        }
        #expect(kept.majorRevision == 1 && kept.expiresAtMs == lateAnswer.expiresAtMs)
        try await Task.sleep(for: .milliseconds(300))  // the first sweep runs 10 ms after the start
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0)
        // The sweep at start stored the expiry as a whole-set removal one revision on; "late" keeps its deadline.
        let database = try DatabaseQueue(path: files.database.path)
        let rows = try database.read { db in
            try Row.fetchAll(db, sql: "SELECT name, major_revision, removed, expires_at FROM metadata_set ORDER BY name")
        }
        #expect(rows.map { $0["name"] as String } == ["late", "soon"])
        #expect(rows.last.map { ($0["major_revision"] as Int64, $0["removed"] as Bool, $0["expires_at"] as Int64) }
            .map { $0 == (2, true, 0) } == true)
        #expect(rows.first.map { $0["expires_at"] as Int64 } == Int64(lateAnswer.expiresAtMs))
        let items = try await database.read { db in try String.fetchAll(db, sql: "SELECT name FROM metadata_item") }
        #expect(items == ["late"])
    }
}
