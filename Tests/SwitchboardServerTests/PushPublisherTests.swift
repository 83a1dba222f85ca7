import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Testing

/// The one fan-out path (``PushPublisher``): every area's change pushes reach their subscribers, compressed by the
/// gateway's one threshold for sessions that negotiated zlib and plain for the others.
@Suite("Push publishing", .timeLimit(.minutes(2)))
struct PushPublisherTests {
    /// The kinds of change push the test waits for, one per area that publishes changes.
    enum Change: Hashable {
        case channelMetadata, userMetadata, presenceState, profile, presenceJoin

        init?(_ push: Push) {
            switch push {
            case .storageEvent(let event): self = event.storageType == .channel ? .channelMetadata : .userMetadata
            case .presenceEvent(let event) where event.eventType == .remoteStateChanged: self = .presenceState
            case .presenceEvent(let event) where event.eventType == .remoteJoin: self = .presenceJoin
            case .profileChanged: self = .profile
            default: return nil
            }
        }
    }

    /// Subscribes `socket` to channel `c` (metadata and presence), to Ana's user metadata and to Ana's profile.
    private static func subscribe(_ socket: RawSocket) async throws {
        socket.send(
            .request(id: 1, .subscribeChannel(SubscribeChannelRequest(channel: "c", withMetadata: true, withPresence: true))))
        socket.send(.request(id: 2, .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Ana"))))
        socket.send(.request(id: 3, .subscribeProfiles(SubscribeProfilesRequest(userIds: ["Ana"]))))
        var answered = 0
        while answered < 3 {
            switch try await socket.next() {
            case .response?: answered += 1
            case .error(_, _, let error)?: Issue.record("subscribing failed: \(error)")
            case nil: throw SwitchboardClientError(code: .unavailable, message: "closed while subscribing")
            default: continue
            }
        }
    }

    /// Reads until one push of every kind in `Change` arrived; returns whether each came compressed.
    private static func changes(on socket: RawSocket) async throws -> [Change: Bool] {
        var seen: [Change: Bool] = [:]
        while seen.count < 5 {
            guard let (message, compressed) = try await socket.nextWithWireForm() else {
                throw SwitchboardClientError(code: .unavailable, message: "closed after \(seen)")
            }
            if case .push(let push) = message, let change = Change(push), seen[change] == nil {
                seen[change] = compressed
            }
        }
        return seen
    }

    @Test("each area's large change push is compressed by the gateway's threshold for zlib sessions only")
    func everyAreasPushesFollowTheOneCompressionThreshold() async throws {
        // 256 is below the 512 a push of one area alone used to default to: a 400-byte state must be compressed.
        try await withFullGateway(configure: { $0.compressionThreshold = 256 }) { gateway in
            let zlib = try RawSocket(gateway, .unix)
            let plain = try RawSocket(gateway, .tcp)
            #expect(try await zlib.login("Watcher", features: ["zlib"]).features == ["zlib"])
            #expect(try await plain.login("Reader").features == [])
            try await Self.subscribe(zlib)
            try await Self.subscribe(plain)

            let large = String(repeating: "state-and-metadata ", count: 22)  // 418 compressible bytes
            let ana = makeClient(gateway, .tcp, user: "Ana")
            try await ana.connect()
            try await ana.subscribeChannel(channel: "c")
            try await ana.setState(channel: "c", items: [StateItem(key: "mood", value: large)])
            try await ana.setChannelMetadata(channel: "c", items: [MetadataItem(key: "k", value: large)])
            _ = try await ana.setUserMetadata(items: [MetadataItem(key: "k", value: large)])
            try await ana.setUserInfo(UserInfo(userId: "Ana", name: "Ana", extra: large))

            let compressedForZlib = try await Self.changes(on: zlib)
            #expect(compressedForZlib == [
                .channelMetadata: true, .userMetadata: true, .presenceState: true, .profile: true, .presenceJoin: false,
            ])
            let compressedForPlain = try await Self.changes(on: plain)
            #expect(compressedForPlain.values.allSatisfy { !$0 }, "\(compressedForPlain)")
            await ana.close()
        }
    }
}
