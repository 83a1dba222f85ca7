import Foundation
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Synchronization
import Testing

/// Resumed metadata subscriptions (`Protocol/SPEC.md` SB-13.1-8) over real sockets: `sinceRevision` on
/// `subscribeUserMetadata` and `subscribeChannel` answers the changes since, or the whole set with `resumeFailed`;
/// the client resumes by itself after a reconnect.
@Suite struct MetadataResumeTests {
    /// Keys `k0000`...: 1,000 of them with a one-byte value take 6,000 bytes, within the 16,384-byte set limit.
    static func key(_ index: Int) -> String { "k" + String(String(10_000 + index).dropFirst()) }

    /// Ana writes `count` items to her set, 100 per call; returns the set's majorRevision after.
    static func fill(_ ana: SwitchboardClient, count: Int) async throws -> UInt64 {
        var revision: UInt64 = 0
        for start in stride(from: 0, to: count, by: 100) {
            let items = (start..<min(start + 100, count)).map { MetadataItem(key: Self.key($0), value: "v") }
            revision = try await ana.setUserMetadata(items: items).majorRevision
        }
        return revision
    }

    /// Subscribes `client` to Ana's metadata from `revision` and returns the snapshot event that follows.
    static func subscribeAna(
        _ client: SwitchboardClient, since revision: UInt64, _ storage: Recorder<StorageEvent>
    ) async throws -> StorageEvent? {
        let before = storage.all.count
        try await client.subscribeUserMetadata(userID: "Ana", sinceRevision: revision)
        let events = await storage.wait { $0.dropFirst(before).contains { $0.eventType == .snapshot } }
        return events.dropFirst(before).first { $0.eventType == .snapshot }
    }

    /// The items sorted by key, to compare a copy with a get.
    static func sorted(_ items: [MetadataItem]) -> [MetadataItem] { items.sorted { $0.key < $1.key } }

    @Test("resuming a 1,000-item set after 10 changes sends the items written and the keys removed since, not 1,000, and the copy then equals the set")
    func resumeSendsOnlyTheChanges() async throws {
        try await withFullGateway { gateway in
            let ana = makeClient(gateway, .tcp, user: "Ana")
            let tony = makeClient(gateway, .unix, user: "Tony")
            try await ana.connect()
            try await tony.connect()
            let storage = Recorder(tony.storageEvents)
            let filled = try await Self.fill(ana, count: 1_000)

            let whole = try #require(try await Self.subscribeAna(tony, since: 0, storage))
            #expect(whole.items.count == 1_000 && whole.majorRevision == filled && whole.resumedFrom == 0)
            #expect(!whole.resumeFailed)
            var copy = MetadataSetCopy()
            copy.apply(whole)
            try await tony.unsubscribeUserMetadata(userID: "Ana")

            // Ten changes while Tony is away: six overwrites, two new keys, two removals.
            for index in [3, 10, 200, 500, 998, 999] {
                try await ana.setUserMetadata(items: [MetadataItem(key: Self.key(index), value: "w")])
            }
            try await ana.setUserMetadata(items: [MetadataItem(key: "new1", value: "n")])
            try await ana.setUserMetadata(items: [MetadataItem(key: "new2", value: "n")])
            try await ana.removeUserMetadata(items: [MetadataItem(key: Self.key(7))])
            try await ana.removeUserMetadata(items: [MetadataItem(key: "new1")])

            let delta = try #require(try await Self.subscribeAna(tony, since: copy.majorRevision, storage))
            #expect(delta.resumedFrom == filled && !delta.resumeFailed && delta.majorRevision == filled + 10)
            #expect(delta.items.map(\.key) == [3, 10, 200, 500, 998, 999].map(Self.key) + ["new2"])
            // new1 came and went after the revision resumed from: listed too, and removing it from the copy does nothing.
            #expect(delta.removedKeys == [Self.key(7), "new1"])
            #expect(delta.items.allSatisfy { $0.revision > Int64(filled) })
            // The push that resumed is a small fraction of the whole set's.
            #expect(delta.wireSize * 20 < whole.wireSize, "delta \(delta.wireSize) B, whole \(whole.wireSize) B")

            copy.apply(delta)
            let read = try await tony.getUserMetadata(userID: "Ana")
            #expect(copy.majorRevision == read.majorRevision)
            #expect(Self.sorted(copy.items) == Self.sorted(read.items))
            await ana.close()
            await tony.close()
        }
    }

    @Test("a resume from the current revision gets no items; from the future, past the removal history or across a whole-set removal it gets the whole set with resumeFailed")
    func resumeFailsWhenTheChangesAreUnknown() async throws {
        try await withFullGateway { gateway in
            let ana = makeClient(gateway, .tcp, user: "Ana")
            try await ana.connect()
            let storage = Recorder(ana.storageEvents)
            let filled = try await Self.fill(ana, count: 400)

            let current = try #require(try await Self.subscribeAna(ana, since: filled, storage))
            #expect(current.resumedFrom == filled && current.items.isEmpty && current.removedKeys.isEmpty)
            #expect(!current.resumeFailed && current.majorRevision == filled)

            let future = try #require(try await Self.subscribeAna(ana, since: filled + 5, storage))
            #expect(future.resumeFailed && future.resumedFrom == 0 && future.items.count == 400)
            #expect(future.majorRevision == filled)

            // One call removing 300 keys: more than the 256 removed keys a set remembers.
            let removed = try await ana.removeUserMetadata(
                items: (0..<300).map { MetadataItem(key: Self.key($0)) })
            let tooOld = try #require(try await Self.subscribeAna(ana, since: filled, storage))
            #expect(tooOld.resumeFailed && tooOld.items.count == 100 && tooOld.majorRevision == removed.majorRevision)
            // After that removal the history is complete again.
            try await ana.removeUserMetadata(items: [MetadataItem(key: Self.key(300))])
            let after = try #require(try await Self.subscribeAna(ana, since: removed.majorRevision, storage))
            #expect(!after.resumeFailed && after.resumedFrom == removed.majorRevision)
            #expect(after.removedKeys == [Self.key(300)] && after.items.isEmpty)

            // A channel set removed as a whole and created again: a resume from before answers the whole set.
            let channel = "resume-room"
            let first = try await ana.setChannelMetadata(channel: channel, items: [MetadataItem(key: "a", value: "1")])
            try await ana.removeChannelMetadata(channel: channel, items: [])
            try await ana.setChannelMetadata(channel: channel, items: [MetadataItem(key: "b", value: "2")])
            let before = storage.all.count
            try await ana.subscribeChannel(
                channel: channel,
                options: ChannelSubscriptionOptions(withMetadata: true, sinceRevision: first.majorRevision))
            let events = await storage.wait { $0.dropFirst(before).contains { $0.eventType == .snapshot } }
            let recreated = try #require(events.dropFirst(before).first { $0.eventType == .snapshot })
            #expect(recreated.storageType == .channel && recreated.target == channel)
            #expect(recreated.resumeFailed && recreated.items.map(\.key) == ["b"])
            await ana.close()
        }
    }

    @Test("a channel subscription with metadata resumes from sinceRevision")
    func channelSubscriptionResumes() async throws {
        try await withFullGateway { gateway in
            let ana = makeClient(gateway, .tcp, user: "Ana")
            try await ana.connect()
            let storage = Recorder(ana.storageEvents)
            let start = try await ana.setChannelMetadata(
                channel: "lobby", items: [MetadataItem(key: "a", value: "1"), MetadataItem(key: "b", value: "1")])
            try await ana.setChannelMetadata(channel: "lobby", items: [MetadataItem(key: "c", value: "1")])
            try await ana.removeChannelMetadata(channel: "lobby", items: [MetadataItem(key: "a")])
            try await ana.subscribeChannel(
                channel: "lobby", options: ChannelSubscriptionOptions(withMetadata: true, sinceRevision: start.majorRevision))
            let snapshot = try #require(await storage.first { $0.eventType == .snapshot && $0.target == "lobby" })
            #expect(snapshot.resumedFrom == start.majorRevision && !snapshot.resumeFailed)
            #expect(snapshot.items.map(\.key) == ["c"] && snapshot.removedKeys == ["a"])
            #expect(snapshot.majorRevision == start.majorRevision + 2)
            await ana.close()
        }
    }

    @Test("after a gateway restart a resume from an older revision gets the whole set with resumeFailed, from the current one no items")
    func restartForgetsTheRemovals() async throws {
        let place = FullGatewayPlace()
        defer { place.remove() }
        let revisions = try await withFullGateway(at: place) { gateway in
            let ana = makeClient(gateway, .unix, user: "Ana")
            try await ana.connect()
            let older = try await ana.setUserMetadata(items: [MetadataItem(key: "a", value: "1"), MetadataItem(key: "b", value: "1")])
            let current = try await ana.removeUserMetadata(items: [MetadataItem(key: "a")])
            await ana.close()
            return (older.majorRevision, current.majorRevision)
        }
        try await withFullGateway(at: place) { gateway in
            let ana = makeClient(gateway, .unix, user: "Ana")
            try await ana.connect()
            let storage = Recorder(ana.storageEvents)
            let older = try #require(try await Self.subscribeAna(ana, since: revisions.0, storage))
            #expect(older.resumeFailed && older.items.map(\.key) == ["b"] && older.majorRevision == revisions.1)
            let current = try #require(try await Self.subscribeAna(ana, since: revisions.1, storage))
            #expect(!current.resumeFailed && current.resumedFrom == revisions.1 && current.items.isEmpty)
            await ana.close()
        }
    }

    @Test("a reconnecting client resumes its metadata subscriptions from the last event it received and gets only the changes made while it was away")
    func clientResumesAfterReconnect() async throws {
        try await withFullGateway { gateway in
            let ana = makeClient(gateway, .tcp, user: "Ana")
            try await ana.connect()
            let filled = try await Self.fill(ana, count: 1_000)
            try await ana.setChannelMetadata(channel: "lobby", items: [MetadataItem(key: "topic", value: "old")])

            // Tony's reconnects wait for the test: the changes below are made while he is away.
            let reconnectAllowed = Atomic<Bool>(false)
            let logins = Atomic<Int>(0)
            let tony = makeClient(gateway, .tcp, user: "Tony") {
                if logins.add(1, ordering: .sequentiallyConsistent).newValue > 1 {
                    while !reconnectAllowed.load(ordering: .sequentiallyConsistent) {
                        try await Task.sleep(for: .milliseconds(10))
                    }
                }
                return ""
            }
            let connection = Recorder(tony.connectionEvents)
            let storage = Recorder(tony.storageEvents)
            try await tony.connect()
            try await tony.subscribeUserMetadata(userID: "Ana")
            try await tony.subscribeChannel(channel: "lobby", options: ChannelSubscriptionOptions(withMetadata: true))
            try await tony.subscribeUserMetadata()  // his own set, named "" in the request
            try await tony.setUserMetadata(items: [MetadataItem(key: "mine", value: "1")])
            await storage.wait { $0.filter { $0.eventType == .snapshot }.count == 3 && $0.contains { $0.eventType == .set } }
            var anaCopy = MetadataSetCopy()
            var lobbyCopy = MetadataSetCopy()
            for event in storage.all where event.target != "Tony" {
                if event.storageType == .user { anaCopy.apply(event) } else { lobbyCopy.apply(event) }
            }
            #expect(anaCopy.items.count == 1_000)

            let session = try #require(gateway.gateway.registry.sessions(ofUser: "Tony").first)
            session.disconnect(code: ErrorCode(rawValue: 0), reason: .kicked, message: "operator request")
            _ = await connection.first { $0.disconnection != nil }
            let seen = storage.all.count
            try await ana.setUserMetadata(items: [MetadataItem(key: Self.key(5), value: "away")])
            try await ana.removeUserMetadata(items: [MetadataItem(key: Self.key(6))])
            try await ana.setChannelMetadata(channel: "lobby", items: [MetadataItem(key: "topic", value: "new")])
            reconnectAllowed.store(true, ordering: .sequentiallyConsistent)

            let resumed = await storage.wait { $0.dropFirst(seen).filter { $0.eventType == .snapshot }.count == 3 }
                .dropFirst(seen)
            let own = try #require(resumed.first { $0.target == "Tony" })
            #expect(own.resumedFrom == 1 && own.items.isEmpty && own.removedKeys.isEmpty)
            let user = try #require(resumed.first { $0.storageType == .user && $0.target == "Ana" })
            let channel = try #require(resumed.first { $0.storageType == .channel })
            #expect(user.resumedFrom == filled && !user.resumeFailed)
            #expect(user.items.map(\.key) == [Self.key(5)] && user.removedKeys == [Self.key(6)])
            #expect(channel.resumedFrom == lobbyCopy.majorRevision && channel.items.map(\.value) == ["new"])
            for event in resumed where event.target != "Tony" {
                if event.storageType == .user { anaCopy.apply(event) } else { lobbyCopy.apply(event) }
            }
            let read = try await tony.getUserMetadata(userID: "Ana")
            #expect(anaCopy.majorRevision == read.majorRevision && Self.sorted(anaCopy.items) == Self.sorted(read.items))
            #expect(try await tony.getChannelMetadata(channel: "lobby").items == lobbyCopy.items)
            await ana.close()
            await tony.close()
        }
    }
}
