import Foundation
import GRDB
import SwitchboardClient
import SwitchboardServer
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Item TTLs over real sockets (`Protocol/SPEC.md` SB-13.1-9): subscribers get an `expired` event from the server,
/// reads stop returning the item, compare-and-set sees it as absent, and deadlines survive a restart.
@Suite struct ItemTTLTests {
    @Test(arguments: Transport.allCases)
    func userMetadataSubscribersGetAnExpiredEventAndGetNoLongerReturnsTheItem(transport: Transport) async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, transport, user: "Tony")
            let watcher = makeClient(gateway, transport, user: "Watcher")
            try await tony.connect()
            try await watcher.connect()
            let events = Recorder(watcher.storageEvents)
            try await watcher.subscribeUserMetadata(userID: "Tony")
            let start = UInt64(Date().timeIntervalSince1970 * 1000)
            _ = try await tony.setUserMetadata(
                items: [.expiring("typing", "yes", after: .milliseconds(300)), MetadataItem(key: "name", value: "Tony")])
            let set = try #require(await events.first { $0.eventType == .set })
            let deadline = try #require(set.items.first { $0.key == "typing" }?.expiresAtMs)
            #expect(deadline >= start + 300 && deadline <= start + 300 + 5_000)
            #expect(set.items.first { $0.key == "name" }?.expiresAtMs == 0)

            let expired = try #require(await events.first { $0.eventType == .expired })
            let heardAt = UInt64(Date().timeIntervalSince1970 * 1000)
            #expect(heardAt >= deadline)
            #expect(expired.target == "Tony" && expired.storageType == .user)
            #expect(expired.items.map(\.key) == ["typing"])
            #expect(expired.majorRevision == 2)
            #expect(expired.publisher == "")
            let got = try await watcher.getUserMetadata(userID: "Tony")
            #expect(got.majorRevision == 2)
            #expect(got.items.map(\.key) == ["name"])
            await tony.close()
            await watcher.close()
        }
    }

    @Test(arguments: [ChannelType.message, .stream])
    func channelMembersWithMetadataGetAnExpiredEventOnEitherChannelType(type: ChannelType) async throws {
        try await withFullGateway { gateway in
            let ana = makeClient(gateway, .tcp, user: "Ana")
            try await ana.connect()
            let events = Recorder(ana.storageEvents)
            try await ana.subscribeChannel(
                channel: "room", type: type, options: ChannelSubscriptionOptions(withMetadata: true))
            _ = try await ana.setChannelMetadata(
                channel: "room", type: type,
                items: [.expiring("cursor", "1,2", after: .milliseconds(200)), .expiring("pin", "x", after: .milliseconds(250))])
            let expired = await events.wait { $0.filter { $0.eventType == .expired }.flatMap(\.items).count >= 2 }
                .filter { $0.eventType == .expired }
            #expect(expired.flatMap(\.items).map(\.key).sorted() == ["cursor", "pin"])
            #expect(expired.allSatisfy { $0.target == "room" && $0.channelType == type && $0.storageType == .channel })
            #expect(expired.last?.majorRevision == UInt64(1 + expired.count))
            let got = try await ana.getChannelMetadata(channel: "room", type: type)
            #expect(got.items.isEmpty && got.majorRevision == UInt64(1 + expired.count))
            await ana.close()
        }
    }

    @Test func anExpiredItemCountsAsAbsentForCompareAndSetAndBadTtlsAreRefused() async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, .unix, user: "Tony")
            try await tony.connect()
            let events = Recorder(tony.storageEvents)
            try await tony.subscribeUserMetadata()
            // 4 s: long enough that the next request comes before the deadline on a loaded machine too.
            _ = try await tony.setUserMetadata(items: [.expiring("lease", "a", after: .seconds(4), revision: 0)])
            // Still there: a create-only write is refused.
            await expectClientError(.itemRevisionConflict) {
                _ = try await tony.setUserMetadata(items: [MetadataItem(key: "lease", value: "b", revision: 0)])
            }
            _ = await events.first { $0.eventType == .expired }
            // Gone: the same create-only write now takes the lease, and a check of the old revision fails.
            await expectClientError(.itemRevisionConflict) {
                _ = try await tony.setUserMetadata(items: [MetadataItem(key: "lease", value: "c", revision: 1)])
            }
            let taken = try await tony.setUserMetadata(
                items: [.expiring("lease", "b", after: .seconds(30), revision: 0)])
            #expect(taken.majorRevision == 3)
            let error = await expectClientError(.invalidTtl) {
                _ = try await tony.setUserMetadata(items: [MetadataItem(key: "k", value: "v", ttlMs: 50)])
            }
            #expect(error?.code.rawValue == 7017)
            await tony.close()
        }
    }

    @Test func deadlinesSurviveARestartAndItemsDueWhileStoppedAreGoneAfterIt() async throws {
        let place = FullGatewayPlace()
        defer { place.remove() }
        let soonMs = try await withFullGateway(at: place) { gateway in
            let tony = makeClient(gateway, .unix, user: "Tony")
            try await tony.connect()
            _ = try await tony.setUserMetadata(
                items: [.expiring("soon", "1", after: .seconds(8)), .expiring("late", "2", after: .seconds(600))])
            let written = try await tony.getUserMetadata()
            await tony.close()
            return written.items.first { $0.key == "soon" }?.expiresAtMs ?? 0
        }
        let stopped = UInt64(Date().timeIntervalSince1970 * 1000)
        // "soon" is due only once the gateway stopped (else its sweep would have expired it, at majorRevision 2).
        try #require(stopped < soonMs)
        try await Task.sleep(for: .milliseconds(Int64(soonMs - stopped) + 200))
        try await withFullGateway(at: place) { gateway in
            let tony = makeClient(gateway, .unix, user: "Tony")
            try await tony.connect()
            let got = try await tony.getUserMetadata()
            #expect(got.items.map(\.key) == ["late"])
            #expect((got.items.first?.expiresAtMs ?? 0) >= stopped + 590_000)
            // Loaded at 1 and raised over its one overdue item (an expiry announced before a crash could have had
            // 2), the first sweep removes "soon" as a change of its own: majorRevision 3.
            var swept = got
            let deadline = Date().addingTimeInterval(5)
            while swept.majorRevision < 3, Date() < deadline {
                try await Task.sleep(for: .milliseconds(10))
                swept = try await tony.getUserMetadata()
            }
            #expect(swept.majorRevision == 3 && swept.items.map(\.key) == ["late"])
            await tony.close()
        }
        // The expiry at start was stored: the file no longer holds the item, and the set is at the expiry's revision.
        let database = try DatabaseQueue(path: place.databasePath)
        let keys = try await database.read { db in try String.fetchAll(db, sql: "SELECT key FROM metadata_item ORDER BY key") }
        let revision = try await database.read { db in
            try Int64.fetchOne(db, sql: "SELECT major_revision FROM metadata_set WHERE name = 'Tony'")
        }
        #expect(keys == ["late"])
        #expect(revision == 3)
    }
}
