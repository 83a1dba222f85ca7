import Foundation
import Logging
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// A gateway with the storage area on a store in the SQLite database at `path` (in memory unless given).
func withStorageGateway<T: Sendable>(
    path: String? = nil,
    storeConfiguration: StoreConfiguration = StoreConfiguration(),
    configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: @Sendable (RunningGateway, MetadataStore, SubscriptionRegistry) async throws -> T
) async throws -> T {
    try await withGateway(
        configure,
        application: { application in
            application.areas = [.storage]
            application.store = storeConfiguration
            application.useDatabase(at: path)
        }
    ) { gateway in
        let services = try #require(gateway.services)
        return try await body(gateway, try #require(services.metadataStore), services.subscriptions)
    }
}

/// Waits for the next storage event on a connection.
func nextStorageEvent(_ connection: SwitchboardConnection, seconds: Double = 2) async throws -> StorageEvent {
    try await withThrowingTaskGroup(of: StorageEvent?.self) { group in
        group.addTask {
            for await push in connection.pushes {
                if case .storageEvent(let event) = push { return event }
            }
            return nil
        }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        let first = try await group.next() ?? nil
        group.cancelAll()
        guard let event = first else { throw SwitchboardClientError(code: .providerTimeout, message: "no storage event") }
        return event
    }
}

@Suite struct StorageTests {
    static let secret = Array("storage-test-secret-of-at-least-32-bytes".utf8)

    @Test(arguments: Transport.allCases)
    func userMetadataSetGetUpdateRemoveOverSockets(transport: Transport) async throws {
        try await withStorageGateway { gateway, _, _ in
            let tony = try await gateway.connect(transport, user: "Tony")
            let set = try await tony.send(
                .setUserMetadata(
                    SetUserMetadataRequest(
                        items: [MetadataItem(key: "Name", value: "Tony"), MetadataItem(key: "Age", value: "40")],
                        recordTs: true, recordUserId: true)))
            #expect(set == .setUserMetadata(SetUserMetadataResponse(majorRevision: 1)))
            guard case .getUserMetadata(let got) = try await tony.send(.getUserMetadata(GetUserMetadataRequest())) else {
                Issue.record("unexpected response")
                return
            }
            #expect(got.userId == "Tony" && got.majorRevision == 1)
            #expect(got.items.map(\.key) == ["Name", "Age"])
            #expect(got.items.allSatisfy { $0.revision == 1 && $0.authorUserId == "Tony" && $0.updateTs > 1_700_000_000_000 })
            // update of a missing item fails and changes nothing
            await #expect(throws: SwitchboardClientError(code: .itemNotFound, message: "")) {
                _ = try await tony.send(.updateUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Age", value: "45"), MetadataItem(key: "Nope", value: "x")])))
            }
            let updated = try await tony.send(.updateUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Age", value: "45")])))
            #expect(updated == .updateUserMetadata(SetUserMetadataResponse(majorRevision: 2)))
            let removed = try await tony.send(.removeUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Name")])))
            #expect(removed == .removeUserMetadata(SetUserMetadataResponse(majorRevision: 3)))
            guard case .getUserMetadata(let after) = try await tony.send(.getUserMetadata(GetUserMetadataRequest(userId: "Tony"))) else { return }
            #expect(after.items.map(\.key) == ["Age"] && after.items.first?.value == "45" && after.items.first?.revision == 2)
            // remove of the whole set, then of something absent
            _ = try await tony.send(.removeUserMetadata(SetUserMetadataRequest()))
            await #expect(throws: SwitchboardClientError(code: .metadataNotFound, message: "")) {
                _ = try await tony.send(.removeUserMetadata(SetUserMetadataRequest()))
            }
        }
    }

    /// Large fan-out pushes are queued as one shared buffer; small ones are copied into the connection's output.
    /// Interleaved, they must still arrive in the order they happened, after the snapshot, on both transports.
    @Test(arguments: Transport.allCases)
    func largeAndSmallEventsArriveInOrderAtEverySubscriber(transport: Transport) async throws {
        try await withStorageGateway { gateway, _, _ in
            let tony = try await gateway.connect(transport, user: "Tony")
            let watchers = try await withThrowingTaskGroup(of: SwitchboardConnection.self) { group in
                for index in 0..<3 {
                    group.addTask {
                        let watcher = try await gateway.connect(transport, user: "watcher\(index)") {
                            $0.features = index == 0 ? [] : ["zlib"]  // plain and compressed frames
                        }
                        _ = try await watcher.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony")))
                        return watcher
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            var generator = SystemRandomNumberGenerator()
            let values = (0..<60).map { index in
                // Every third value is several KiB of incompressible hex, far above the shared-push threshold.
                index % 3 == 2
                    ? (0..<3_000).map { _ in String(UInt8.random(in: 0...15, using: &generator), radix: 16) }.joined()
                    : "v\(index)"
            }
            // Pipelined: the events of one write burst leave the server in one flush.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for value in values {
                    group.addTask {
                        _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: value)])))
                    }
                }
                try await group.waitForAll()
            }
            for watcher in watchers {
                var received: [(UInt64, String)] = []
                for await push in watcher.pushes {
                    guard case .storageEvent(let event) = push, event.eventType != .snapshot else { continue }
                    received.append((UInt64(event.majorRevision), event.items.first?.value ?? ""))
                    if received.count == values.count { break }
                }
                // Revisions grow one by one (the server's order), and each carries the value written at that revision.
                #expect(received.map(\.0) == received.map(\.0).sorted() && Set(received.map(\.0)).count == values.count)
                #expect(Set(received.map(\.1)) == Set(values))
            }
        }
    }

    @Test func usersMayWriteOnlyTheirOwnMetadataUnlessAdmin() async throws {
        let authority = TokenAuthority(secret: Self.secret)
        let expiry = Int64(Date().timeIntervalSince1970) + 600
        // The default grants (own data only) and reading anyone's metadata (`Protocol/SPEC.md` §5.10).
        let grants = GrantSet(
            GrantSet.ownDataOnly.grants + [Grant(kind: .user, pattern: ResourcePattern("*")!, permissions: [.read])])
        try await withStorageGateway(configure: {
            $0.tokenSecret = Self.secret
            $0.defaultGrants = grants
        }) { gateway, _, _ in
            let eve = try await gateway.connect(.tcp, user: "", token: authority.mint(userID: "Eve", expiresAt: expiry))
            await #expect(throws: SwitchboardClientError(code: .permissionDenied, message: "")) {
                _ = try await eve.send(.setUserMetadata(SetUserMetadataRequest(userId: "Tony", items: [MetadataItem(key: "Name", value: "Eve")])))
            }
            let admin = try await gateway.connect(.tcp, user: "", token: authority.mint(userID: "ops", expiresAt: expiry, role: .admin))
            _ = try await admin.send(.setUserMetadata(SetUserMetadataRequest(userId: "Tony", items: [MetadataItem(key: "Name", value: "Tony")])))
            // Reading another user's metadata is allowed with a read grant on them.
            guard case .getUserMetadata(let got) = try await eve.send(.getUserMetadata(GetUserMetadataRequest(userId: "Tony"))) else { return }
            #expect(got.items.first?.value == "Tony")
        }
    }

    @Test(arguments: Transport.allCases)
    func racingCompareAndSetWritersHaveExactlyOneWinner(transport: Transport) async throws {
        try await withStorageGateway { gateway, _, _ in
            let host = try await gateway.connect(transport, user: "host")
            _ = try await host.send(.setChannelMetadata(SetChannelMetadataRequest(channel: "live", items: [MetadataItem(key: "guest", value: "")])))
            var viewers: [SwitchboardConnection] = []
            for index in 0..<20 { viewers.append(try await gateway.connect(transport, user: "viewer\(index)")) }
            let outcomes = try await withThrowingTaskGroup(of: Result<UInt64, SwitchboardClientError>.self) { group in
                for (index, viewer) in viewers.enumerated() {
                    group.addTask {
                        do {
                            let response = try await viewer.send(
                                .setChannelMetadata(
                                    SetChannelMetadataRequest(
                                        channel: "live", items: [MetadataItem(key: "guest", value: "viewer\(index)", revision: 1)],
                                        majorRevision: 1)))
                            guard case .setChannelMetadata(let body) = response else { return .failure(.init(code: .internal, message: "")) }
                            return .success(body.majorRevision)
                        } catch let error as SwitchboardClientError {
                            return .failure(error)
                        }
                    }
                }
                var all: [Result<UInt64, SwitchboardClientError>] = []
                for try await outcome in group { all.append(outcome) }
                return all
            }
            let winners = outcomes.filter { if case .success = $0 { return true } else { return false } }
            #expect(winners.count == 1)
            #expect(outcomes.allSatisfy {
                if case .failure(let error) = $0 { return error.code == .revisionConflict && error.body?.currentRevision == 2 }
                return true
            })
        }
    }

    @Test(arguments: Transport.allCases)
    func subscribersGetASnapshotThenEventsWithTheNewRevisions(transport: Transport) async throws {
        try await withStorageGateway { gateway, _, _ in
            let tony = try await gateway.connect(transport, user: "Tony")
            let watcher = try await gateway.connect(transport, user: "watcher")
            _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Mood", value: "ok")])))
            _ = try await watcher.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony")))
            let snapshot = try await nextStorageEvent(watcher)
            #expect(snapshot.eventType == .snapshot && snapshot.majorRevision == 1 && snapshot.items.first?.value == "ok")
            let sent = ContinuousClock.now
            _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Mood", value: "great")], majorRevision: 1)))
            let event = try await nextStorageEvent(watcher)
            // The documents promise 100 ms; the benchmark measures it. Here only a gross delay fails: the write is
            // synced to disk first, and on a loaded 2-core CI machine (cluster suites run beside this one) that alone
            // has taken over a second.
            #expect(ContinuousClock.now - sent < .seconds(5))
            #expect(event.storageType == .user && event.eventType == .set && event.target == "Tony" && event.publisher == "Tony")
            #expect(event.majorRevision == 2 && event.items.first?.revision == 2 && event.items.first?.value == "great")
            // The revisions in the event are enough to CAS again.
            _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Mood", value: "calm", revision: 2)], majorRevision: 2)))
            #expect(try await nextStorageEvent(watcher).majorRevision == 3)
            _ = try await watcher.send(.unsubscribeUserMetadata(UnsubscribeUserMetadataRequest(userId: "Tony")))
            await #expect(throws: SwitchboardClientError(code: .notSubscribed, message: "")) {
                _ = try await watcher.send(.unsubscribeUserMetadata(UnsubscribeUserMetadataRequest(userId: "Tony")))
            }
        }
    }

    @Test func channelMembersWithMetadataGetChannelEventsAndOthersDoNot() async throws {
        try await withStorageGateway { gateway, _, subscriptions in
            let writer = try await gateway.connect(.tcp, user: "writer")
            let member = try await gateway.connect(.tcp, user: "member")
            let other = try await gateway.connect(.tcp, user: "other")
            let sessions = gateway.gateway.registry
            let lobby = ChannelKey(name: "lobby", type: .stream)
            _ = subscriptions.join(try #require(sessions.sessions(ofUser: "member").first), channel: lobby, options: ChannelOptions(withMetadata: true), maxChannelsPerUser: 50)
            _ = subscriptions.join(try #require(sessions.sessions(ofUser: "other").first), channel: lobby, options: ChannelOptions(withMetadata: false), maxChannelsPerUser: 50)
            // A write to the message channel of the same name is another channel.
            _ = try await writer.send(.setChannelMetadata(SetChannelMetadataRequest(channel: "lobby", channelType: .message, items: [MetadataItem(key: "topic", value: "a")])))
            _ = try await writer.send(.setChannelMetadata(SetChannelMetadataRequest(channel: "lobby", channelType: .stream, items: [MetadataItem(key: "topic", value: "b")])))
            let event = try await nextStorageEvent(member)
            #expect(event.storageType == .channel && event.channelType == .stream && event.items.first?.value == "b")
            await #expect(throws: SwitchboardClientError.self) { _ = try await nextStorageEvent(other, seconds: 0.3) }
        }
    }

    @Test func lockGuardedWritesNeedTheLockHolder() async throws {
        try await withStorageGateway { gateway, _, _ in
            let alice = try await gateway.connect(.tcp, user: "alice")
            let bob = try await gateway.connect(.tcp, user: "bob")
            _ = try await alice.send(.setLock(SetLockRequest(channel: "room", lockName: "mic", ttlSeconds: 30)))
            _ = try await alice.send(.acquireLock(AcquireLockRequest(channel: "room", lockName: "mic")))
            _ = try await alice.send(.setChannelMetadata(SetChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "speaker", value: "alice")], lock: "mic")))
            await #expect(throws: SwitchboardClientError(code: .lockNotHeld, message: "")) {
                _ = try await bob.send(.setChannelMetadata(SetChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "speaker", value: "bob")], lock: "mic")))
            }
            await #expect(throws: SwitchboardClientError(code: .lockHeld, message: "")) {
                _ = try await bob.send(.acquireLock(AcquireLockRequest(channel: "room", lockName: "mic")))
            }
            // bob waits in line; alice releases; bob gets it.
            async let waiting = bob.send(.acquireLock(AcquireLockRequest(channel: "room", lockName: "mic", retry: true)))
            try await Task.sleep(for: .milliseconds(100))
            _ = try await alice.send(.releaseLock(ReleaseLockRequest(channel: "room", lockName: "mic")))
            #expect(try await waiting == .acquireLock(EmptyBody()))
            guard case .getLocks(let locks) = try await alice.send(.getLocks(GetLocksRequest(channel: "room"))) else { return }
            #expect(locks.locks.first?.owner == "bob" && locks.locks.first?.ttlSeconds == 30)
            _ = try await bob.send(.setChannelMetadata(SetChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "speaker", value: "bob")], lock: "mic")))
        }
    }

    @Test func lockHeldByADisconnectedUserIsReleasedAfterItsTTL() async throws {
        let now = Mutex<UInt64>(1_000_000)
        var configuration = StoreConfiguration()
        configuration.clock = StoreClock { now.withLock { $0 } }
        try await withStorageGateway(storeConfiguration: configuration) { gateway, store, _ in
            let holder = try await gateway.connect(.tcp, user: "holder")
            let other = try await gateway.connect(.tcp, user: "other")
            _ = try await holder.send(.setLock(SetLockRequest(channel: "room", lockName: "mic", ttlSeconds: 10)))
            _ = try await holder.send(.acquireLock(AcquireLockRequest(channel: "room", lockName: "mic")))
            await holder.close()
            try await Task.sleep(for: .milliseconds(100))
            now.withLock { $0 += 5_000 }
            store.tick()
            await #expect(throws: SwitchboardClientError(code: .lockHeld, message: "")) {
                _ = try await other.send(.acquireLock(AcquireLockRequest(channel: "room", lockName: "mic")))
            }
            now.withLock { $0 += 6_000 }
            store.tick()
            _ = try await other.send(.acquireLock(AcquireLockRequest(channel: "room", lockName: "mic")))
        }
    }

    /// SB-13.2-1, §13.6: a dropped holder's lock TTL runs from the drop, not from the end of the presence timeout:
    /// the lock expires after its 10 s while the holder is still a member of the channel (presence timeout 30 s).
    @Test func aDroppedHoldersLockExpiresOneTTLAfterTheDropWhileItIsStillAMember() async throws {
        let now = Mutex<UInt64>(1_000_000)
        var storeConfiguration = StoreConfiguration()
        storeConfiguration.clock = StoreClock { now.withLock { $0 } }
        try await withGateway(application: {
            $0.areas = [.storage, .presence]
            $0.store = storeConfiguration
        }) { gateway in
            let services = try #require(gateway.services)
            let store = try #require(services.metadataStore)
            let subscriptions = services.subscriptions
            let holder = try await gateway.connect(.tcp, user: "holder")
            let other = try await gateway.connect(.tcp, user: "other")
            _ = try await holder.send(.subscribeChannel(SubscribeChannelRequest(channel: "room", withPresence: false)))
            _ = try await holder.send(.setLock(SetLockRequest(channel: "room", lockName: "mic", ttlSeconds: 10)))
            _ = try await holder.send(.acquireLock(AcquireLockRequest(channel: "room", lockName: "mic")))
            await holder.close()
            // Presence hears of the end after storage (observer order): then the TTL has started.
            let room = ChannelKey(name: "room", type: .message)
            let deadline = ContinuousClock.now + .seconds(5)
            while !subscriptions.members(of: room).isEmpty && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(subscriptions.members(of: room).isEmpty)

            now.withLock { $0 += 9_900 }
            store.tick()
            await #expect(throws: SwitchboardClientError(code: .lockHeld, message: "")) {
                _ = try await other.send(.acquireLock(AcquireLockRequest(channel: "room", lockName: "mic")))
            }
            now.withLock { $0 += 200 }
            store.tick()
            _ = try await other.send(.acquireLock(AcquireLockRequest(channel: "room", lockName: "mic")))
            guard case .getLocks(let locks) = try await other.send(.getLocks(GetLocksRequest(channel: "room"))) else {
                Issue.record("unexpected response")
                return
            }
            #expect(locks.locks.first?.owner == "other")
            // The holder is still listed: the presence timeout (30 s) has not run out.
            guard case .whoNow(let who) = try await other.send(.whoNow(WhoNowRequest(channel: "room"))) else {
                Issue.record("unexpected response")
                return
            }
            #expect(who.users.map(\.userId) == ["holder"])
        }
    }

    /// Gets are answered from the request bytes; every case the typed path reports as an error must still be
    /// reported with its code, with the connection kept and the store unchanged.
    @Test(arguments: Transport.allCases)
    func getsAnswerEveryCaseAndReportBadOnesWithTheirCodes(transport: Transport) async throws {
        try await withStorageGateway { gateway, _, _ in
            let tony = try await gateway.connect(transport, user: "Tony")
            let alice = try await gateway.connect(transport, user: "alice")
            _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Name", value: "Tony")])))
            _ = try await tony.send(
                .setChannelMetadata(SetChannelMetadataRequest(channel: "lobby", channelType: .stream, items: [MetadataItem(key: "t", value: "s")])))
            // The caller's own set (empty id), someone else's, an absent one; channel type is part of the identity.
            let own = try await tony.send(.getUserMetadata(GetUserMetadataRequest()))
            let other = try await alice.send(.getUserMetadata(GetUserMetadataRequest(userId: "Tony")))
            let absent = try await alice.send(.getUserMetadata(GetUserMetadataRequest(userId: "nobody")))
            guard case .getUserMetadata(let ownSet) = own, case .getUserMetadata(let otherSet) = other,
                case .getUserMetadata(let absentSet) = absent
            else {
                Issue.record("unexpected responses")
                return
            }
            #expect(ownSet.userId == "Tony" && ownSet.majorRevision == 1 && ownSet.items.map(\.value) == ["Tony"])
            #expect(ownSet.items.first?.revision == 1)
            #expect(otherSet == ownSet)
            #expect(absentSet == GetUserMetadataResponse(majorRevision: 0, items: [], userId: "nobody"))
            guard case .getChannelMetadata(let stream) = try await alice.send(.getChannelMetadata(GetChannelMetadataRequest(channel: "lobby", channelType: .stream))),
                case .getChannelMetadata(let message) = try await alice.send(.getChannelMetadata(GetChannelMetadataRequest(channel: "lobby")))
            else {
                Issue.record("unexpected responses")
                return
            }
            #expect(stream.majorRevision == 1 && stream.items.map(\.value) == ["s"])
            #expect(message == GetChannelMetadataResponse(majorRevision: 0, items: []))

            // Bad gets, as raw frames: each answered with its code, the connection kept.
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("mallory")
            func get(_ op: Opcode, _ id: UInt32, _ body: [UInt8]) {
                var frame = ByteBuffer()
                FrameEncoder.encodeRaw(
                    header: FrameHeader(kind: .request, op: op.rawValue, requestID: id), body: ByteBuffer(bytes: body), into: &frame)
                socket.send(frame)
            }
            let tooLong = [UInt8](repeating: UInt8(ascii: "x"), count: 65)
            get(.getUserMetadata, 11, [0x0A, 65] + tooLong)  // a 65-byte user id
            get(.getUserMetadata, 12, [0x0A, 0x02, 0xC3, 0x28])  // not UTF-8
            get(.getUserMetadata, 13, [0x08, 0x01])  // field 1 as a varint
            get(.getChannelMetadata, 14, [0x10, 0x01])  // no channel name
            get(.getChannelMetadata, 15, [0x0A, 0x01, 0x61, 0x10, 0x09])  // channel type 9
            get(.getUserMetadata, 16, [0x0A, 0x04] + Array("Tony".utf8))  // a good one behind them
            var codes: [UInt32: ErrorCode] = [:]
            var answered: GetUserMetadataResponse?
            for _ in 0..<6 {
                switch try await socket.next() {
                case .error(let id, _, let body)?: codes[id] = body.errorCode
                case .response(16, .getUserMetadata(let response))?: answered = response
                default: Issue.record("unexpected frame")
                }
            }
            #expect(codes == [11: .identifierTooLong, 12: .invalidUtf8, 13: .malformedBody, 14: .identifierTooLong, 15: .invalidArgument])
            #expect(answered == ownSet)
            // Nothing changed.
            guard case .getUserMetadata(let after) = try await tony.send(.getUserMetadata(GetUserMetadataRequest())) else { return }
            #expect(after == ownSet)
            await tony.close()
            await alice.close()
        }
    }

    @Test func acknowledgedWritesSurviveARestartOfTheGateway() async throws {
        let database = TemporaryPath("sb-restart", suffix: ".sqlite")
        defer { database.remove() }
        let path = database.path
        try await withStorageGateway(path: path) { gateway, _, _ in
            let tony = try await gateway.connect(.tcp, user: "Tony")
            for index in 0..<20 {
                _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k\(index)", value: "v\(index)")])))
            }
            _ = try await tony.send(.setChannelMetadata(SetChannelMetadataRequest(channel: "lobby", channelType: .stream, items: [MetadataItem(key: "topic", value: "x")])))
        }
        try await withStorageGateway(path: path) { gateway, _, _ in
            let tony = try await gateway.connect(.tcp, user: "Tony")
            guard case .getUserMetadata(let got) = try await tony.send(.getUserMetadata(GetUserMetadataRequest())) else { return }
            #expect(got.majorRevision == 20 && got.items.count == 20 && got.items.last?.value == "v19")
            guard case .getChannelMetadata(let channel) = try await tony.send(.getChannelMetadata(GetChannelMetadataRequest(channel: "lobby", channelType: .stream))) else { return }
            #expect(channel.items.first?.value == "x")
        }
    }
}
