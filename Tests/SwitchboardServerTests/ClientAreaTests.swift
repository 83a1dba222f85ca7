import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Testing

/// Every typed call of ``SwitchboardClient`` against a real gateway with all areas, over TCP and Unix sockets,
/// with the pushes each area sends arriving on that area's stream.
@Suite struct ClientAreaTests {
    @Test("storage calls round-trip and storage events arrive on storageEvents", arguments: Transport.allCases)
    func storage(transport: Transport) async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, transport, user: "Tony")
            let ana = makeClient(gateway, transport, user: "Ana")
            defer { Task { await tony.close(); await ana.close() } }
            let storage = Recorder(tony.storageEvents)
            try await tony.connect()
            try await ana.connect()

            try await tony.subscribeUserMetadata(userID: "Ana")
            #expect(await storage.first { $0.eventType == .snapshot && $0.target == "Ana" } != nil)
            let set = try await ana.setUserMetadata(
                items: [MetadataItem(key: "mood", value: "calm"), MetadataItem(key: "city", value: "Oslo")],
                options: MetadataWriteOptions(recordTimestamp: true, recordAuthor: true))
            #expect(set.majorRevision == 1)
            let change = await storage.first { $0.eventType == .set && $0.target == "Ana" }
            #expect(change?.items.map(\.key) == ["mood", "city"] && change?.publisher == "Ana")
            let read = try await tony.getUserMetadata(userID: "Ana")
            #expect(read.userId == "Ana" && read.majorRevision == 1 && read.items.allSatisfy { $0.authorUserId == "Ana" })
            #expect(try await ana.updateUserMetadata(items: [MetadataItem(key: "mood", value: "busy")]).majorRevision == 2)
            #expect(try await ana.removeUserMetadata(items: [MetadataItem(key: "city")]).majorRevision == 3)
            #expect(try await ana.getUserMetadata().items.map(\.value) == ["busy"])
            try await tony.unsubscribeUserMetadata(userID: "Ana")
            #expect(tony.restorableSubscriptions.isEmpty)

            // Channel sets, with a value big enough to travel compressed (zlib was negotiated).
            #expect(tony.welcome?.features == ["zlib"])
            let big = String(repeating: "switchboard ", count: 1_000)
            #expect(try await tony.setChannelMetadata(channel: "lobby", items: [MetadataItem(key: "topic", value: big)]).majorRevision == 1)
            let channel = try await ana.getChannelMetadata(channel: "lobby")
            #expect(channel.items.first?.value == big)
            let updated = try await tony.updateChannelMetadata(
                channel: "lobby", items: [MetadataItem(key: "topic", value: "short")],
                options: MetadataWriteOptions(majorRevision: 1))
            #expect(updated.majorRevision == 2)
            #expect(try await tony.removeChannelMetadata(channel: "lobby").majorRevision == 0)
            #expect(try await ana.getChannelMetadata(channel: "lobby").items.isEmpty)
        }
    }

    @Test("lock calls round-trip and lock events arrive on lockEvents", arguments: Transport.allCases)
    func locks(transport: Transport) async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, transport, user: "Tony")
            let ana = makeClient(gateway, transport, user: "Ana")
            defer { Task { await tony.close(); await ana.close() } }
            let locks = Recorder(tony.lockEvents)
            try await tony.connect()
            try await ana.connect()

            try await tony.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withLock: true))
            #expect(await locks.first { $0.eventType == .snapshot && $0.channel == "room" } != nil)
            try await tony.setLock(channel: "room", name: "mic", ttlSeconds: 30)
            #expect(await locks.first { $0.eventType == .set } != nil)
            try await ana.acquireLock(channel: "room", name: "mic")
            #expect(await locks.first { $0.eventType == .acquired }?.locks.first?.owner == "Ana")
            #expect(try await tony.getLocks(channel: "room").locks == [LockDetail(lockName: "mic", owner: "Ana", ttlSeconds: 30)])
            await expectClientError(.lockHeld, kind: .server) { try await tony.acquireLock(channel: "room", name: "mic") }
            try await ana.releaseLock(channel: "room", name: "mic")
            #expect(await locks.first { $0.eventType == .released } != nil)
            try await ana.acquireLock(channel: "room", name: "mic")
            try await tony.revokeLock(channel: "room", name: "mic", owner: "Ana")
            #expect(try await tony.getLocks(channel: "room").locks.first?.owner == "")
            try await tony.removeLock(channel: "room", name: "mic")
            #expect(await locks.first { $0.eventType == .removed } != nil)
            await expectClientError(.lockNotFound) { try await tony.releaseLock(channel: "room", name: "mic") }
        }
    }

    @Test("channel and presence calls round-trip and presence events arrive on presenceEvents", arguments: Transport.allCases)
    func presence(transport: Transport) async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, transport, user: "Tony")
            let ana = makeClient(gateway, transport, user: "Ana")
            defer { Task { await tony.close(); await ana.close() } }
            let presence = Recorder(tony.presenceEvents)
            try await tony.connect()
            try await ana.connect()

            try await tony.subscribeChannel(channel: "lobby", type: .stream)
            #expect(await presence.first { $0.eventType == .snapshot && $0.channel == "lobby" } != nil)
            try await ana.subscribeChannel(channel: "lobby", type: .stream)
            #expect(await presence.first { $0.eventType == .remoteJoin && $0.publisher == "Ana" } != nil)
            try await ana.setState(channel: "lobby", type: .stream, items: [StateItem(key: "typing", value: "yes")])
            #expect(await presence.first { $0.eventType == .remoteStateChanged && $0.publisher == "Ana" }?.states
                == [StateItem(key: "typing", value: "yes")])
            #expect(try await tony.getState(channel: "lobby", type: .stream, userID: "Ana").items.map(\.key) == ["typing"])
            try await ana.removeState(channel: "lobby", type: .stream)
            #expect(try await ana.getState(channel: "lobby", type: .stream).items.isEmpty)
            let who = try await tony.whoNow(channel: "lobby", type: .stream, includeState: true)
            #expect(who.totalOccupancy == 2 && who.users.map(\.userId) == ["Ana", "Tony"] && who.nextPage.isEmpty)
            let whereAna = try await tony.whereNow(userID: "Ana")
            #expect(whereAna.channels == [ChannelRef(channel: "lobby", channelType: .stream)])
            try await ana.unsubscribeChannel(channel: "lobby", type: .stream)
            #expect(await presence.first { $0.eventType == .remoteLeave && $0.publisher == "Ana" } != nil)
            await expectClientError(.notSubscribed) { try await ana.unsubscribeChannel(channel: "lobby", type: .stream) }
            #expect(tony.restorableSubscriptions.count == 1 && ana.restorableSubscriptions.isEmpty)
        }
    }

    @Test("event calls round-trip and published events arrive on subscribedEvents", arguments: Transport.allCases)
    func events(transport: Transport) async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, transport, user: "Tony")
            let ana = makeClient(gateway, transport, user: "Ana")
            defer { Task { await tony.close(); await ana.close() } }
            let events = Recorder(tony.subscribedEvents)
            try await tony.connect()
            try await ana.connect()

            let subscribed = try await tony.subscribeEvent(publishers: ["Ana", ""], expirySeconds: 3600)
            #expect(subscribed.failedPublishers == [""])
            let query = try await tony.queryEventSubscriptions(publishers: ["Ana"])
            #expect(query.subscriptions.map(\.publisher) == ["Ana"] && query.subscriptions[0].remainingSeconds > 3000)
            let published = try await ana.publishEvent(value: 10_042, expirySeconds: 600, ext: "hello")
            #expect(!published.eventId.isEmpty)
            let received = await events.first { $0.value == 10_042 }
            #expect(received?.publisher == "Ana" && received?.ext == "hello" && received?.eventId == published.eventId)
            try await tony.unsubscribeEvent(publishers: ["Ana"])
            #expect(try await tony.queryEventSubscriptions(publishers: ["Ana"]).subscriptions.isEmpty)
            await expectClientError(.reservedEventValue) { _ = try await ana.publishEvent(value: 5) }
        }
    }

    @Test("profile calls round-trip; changes and provider requests arrive on their streams", arguments: Transport.allCases)
    func profiles(transport: Transport) async throws {
        try await withFullGateway { gateway in
            // Open development mode: every session is an admin, so the admin-only calls are allowed.
            let tony = makeClient(gateway, transport, user: "Tony")
            let provider = makeClient(gateway, transport, user: "directory")
            defer { Task { await tony.close(); await provider.close() } }
            let changes = Recorder(tony.profileChanges)
            try await tony.connect()
            try await provider.connect()

            try await tony.subscribeProfiles(userIDs: ["Tony"], groupIDs: ["band"])
            try await tony.setUserInfo(UserInfo(userId: "Tony", name: "Tony S"))
            #expect(await changes.first { $0.kind == .user && $0.id == "Tony" }?.user?.name == "Tony S")
            let users = try await tony.getUserInfo(userIDs: ["Tony", "Nobody"])
            #expect(users.users.map(\.name) == ["Tony S"] && users.missing == ["Nobody"])
            try await tony.setGroupInfo(GroupInfo(groupId: "band", name: "The Band"))
            #expect(await changes.first { $0.kind == .group && $0.id == "band" } != nil)
            #expect(try await tony.getGroupInfo(groupIDs: ["band"]).groups.map(\.name) == ["The Band"])
            try await tony.setGroupMemberInfo(GroupMemberInfo(groupId: "band", userId: "Tony", nickname: "drums"))
            #expect(try await tony.getGroupMemberInfo(groupID: "band", userIDs: ["Tony"]).members.map(\.nickname) == ["drums"])
            #expect(try await tony.updateGroupMembers(groupID: "band", add: ["Tony", "Ana", "Bob"]).memberCount == 3)
            let page = try await tony.getGroupMembers(groupID: "band", limit: 2)
            #expect(page.userIds == ["Ana", "Bob"] && page.totalMembers == 3 && !page.nextPage.isEmpty)
            #expect(try await tony.getGroupMembers(groupID: "band", page: page.nextPage, limit: 2).userIds == ["Tony"])
            #expect(try await tony.clearProfile(kind: .groupMember, id: "band", memberUserID: "Tony").removed == 1)
            try await tony.unsubscribeProfiles(userIDs: ["Tony"], groupIDs: ["band"])
            #expect(tony.restorableSubscriptions.isEmpty)

            // A provider answers for records the directory does not hold.
            let requests = Recorder(provider.providerRequests)
            try await provider.registerProvider(kinds: [.user])
            #expect(provider.restorableSubscriptions == [.provider(kinds: [.user])])
            async let lookup = tony.getUserInfo(userIDs: ["Ghost", "Phantom"])
            for id in ["Ghost", "Phantom"] {
                let request = try #require(await requests.first { $0.id == id })
                let answer: ProviderAnswer = id == "Ghost" ? .user(UserInfo(userId: "Ghost", name: "Boo")) : .notFound
                try await provider.answerProvider(request, with: answer)
            }
            let found = try await lookup
            #expect(found.users.map(\.name) == ["Boo"] && found.missing == ["Phantom"])
        }
    }

    @Test("a second consumer gets its own stream of the same pushes")
    func broadcastStreams() async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, .unix, user: "Tony")
            defer { Task { await tony.close() } }
            try await tony.connect()
            let first = Recorder(tony.makeStorageEventStream())
            let second = Recorder(tony.makeStorageEventStream())
            let everything = Recorder(tony.makePushStream())
            try await tony.subscribeUserMetadata()
            try await tony.setUserMetadata(items: [MetadataItem(key: "k", value: "v")])
            for recorder in [first, second] {
                let events = await recorder.wait { $0.count >= 2 }
                #expect(events.map(\.eventType) == [.snapshot, .set])
            }
            #expect(await everything.wait { $0.count >= 2 }.count == 2)
        }
    }
}
