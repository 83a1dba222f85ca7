import Foundation
import SwitchboardClient
@testable import SwitchboardHTTPAPI
@testable import SwitchboardServer
import SwitchboardWire
import Synchronization
import Testing

/// `POST /v1/broadcast` (`Protocol/SPEC.md` SB-13.11-9): a backend's broadcast reaches the channel's wire members with
/// the caller's user id as `sender`, in sequence order, is kept for a member's rewind unless `noRewind`, and is not held
/// to a session's broadcast rate.
@Suite("The HTTP API: channel broadcasts from a backend")
struct HTTPAPIBroadcastTests {
    /// The `channelBroadcast` pushes of `connection` until `count` came, or those that came within 10 s.
    static func broadcasts(_ connection: SwitchboardConnection, count: Int) async throws -> [ChannelBroadcast] {
        let seen = Mutex<[ChannelBroadcast]>([])
        _ = try await within {
            for await push in connection.pushes {
                guard case .channelBroadcast(let broadcast) = push else { continue }
                if seen.withLock({ $0.append(broadcast); return $0.count >= count }) { return true }
            }
            return nil
        }
        return seen.withLock { $0 }
    }

    @Test("a broadcast over HTTP reaches every wire member with the key's name as sender, in order, past a session's burst; noRewind ones are not rewound")
    func broadcastReachesWireMembers() async throws {
        try await withAPIGateway { gateway in
            let alice = try await gateway.connect("alice")
            let bob = try await gateway.connect("bob")
            defer {
                Task {
                    await alice.close()
                    await bob.close()
                }
            }
            for member in [alice, bob] {
                _ = try await member.send(.subscribeChannel(SubscribeChannelRequest(channel: "board", withPresence: false)))
            }
            // More than a session may send at once: the API's caller has no session and no per-session rate.
            let count = BroadcastConfiguration().burst + 20
            var sequences: [UInt64] = []
            for index in 0..<count {
                let answer = try await gateway.call("broadcast", #"{"channel":"board","data":"\#(index)"}"#)
                #expect(answer.status == 200, "broadcast \(index): \(answer)")
                #expect(try answer.json["delivered"] == .uint(2), "broadcast \(index): \(answer)")
                sequences.append(try #require(try answer.json["sequence"]?.uint64Value, "\(answer)"))
            }
            // echo does nothing for a caller that is no member; noRewind delivers without keeping.
            let cursor = try await gateway.call("broadcast", #"{"channel":"board","data":"cursor","echo":true,"noRewind":true}"#)
            #expect(try cursor.status == 200 && cursor.json["delivered"] == .uint(2), "\(cursor)")
            let cursorSequence = try #require(try cursor.json["sequence"]?.uint64Value)
            #expect(zip(sequences, sequences.dropFirst() + [cursorSequence]).allSatisfy { $0 < $1 }, "\(sequences)")

            let expectedData = (0..<count).map(String.init) + ["cursor"]
            for member in [alice, bob] {
                let received = try await Self.broadcasts(member, count: count + 1)
                #expect(received.map(\.data) == expectedData)
                #expect(received.allSatisfy { $0.sender == APITokens.keyName && $0.channel == "board" })
                #expect(received.map(\.sequence) == sequences + [cursorSequence])
            }

            guard case .rewindBroadcasts(let rewound) = try await bob.send(
                .rewindBroadcasts(RewindBroadcastsRequest(channel: "board", limit: 100)))
            else {
                Issue.record("not a rewindBroadcasts response")
                return
            }
            #expect(rewound.broadcasts.map(\.data) == (count - 100..<count).map(String.init))
            #expect(rewound.broadcasts.allSatisfy { $0.sender == APITokens.keyName })
            #expect(rewound.latestSequence == cursorSequence)

            // No rate was kept for the API's calls (each is a session of its own that never ends); a client's
            // broadcast over the wire has one.
            let area = try #require(gateway.running.services.broadcasts)
            #expect(area.sessionsRateLimited == 0)
            let admin = try await gateway.connect("carol", role: .admin)
            _ = try await admin.send(.broadcast(BroadcastRequest(channel: "board", data: "from carol")))
            #expect(area.sessionsRateLimited == 1)
            await admin.close()
        }
    }

    @Test("a broadcast over HTTP to a channel without members delivers to none; bad payloads and channels get the wire's errors, rewind is a session's")
    func broadcastErrorsOverHTTP() async throws {
        try await withAPIGateway { gateway in
            let empty = try await gateway.call("broadcast", #"{"channel":"nobody-here","data":"x"}"#)
            #expect(try empty.status == 200 && empty.json["delivered"] == nil, "\(empty)")
            let large = String(repeating: "x", count: BroadcastConfiguration.maxDataBytesLimit + 1)
            let tooLarge = try await gateway.call("broadcast", #"{"channel":"board","data":"\#(large)"}"#)
            #expect(tooLarge.status == 400 && tooLarge.error?.name == "broadcastTooLarge", "\(tooLarge)")
            let longName = String(repeating: "c", count: 65)
            let badChannel = try await gateway.call("broadcast", #"{"channel":"\#(longName)","data":"x"}"#)
            #expect(badChannel.status == 400 && badChannel.error?.name == "identifierTooLong", "\(badChannel)")
            let noKey = try await gateway.call("broadcast", #"{"channel":"board","data":"x"}"#, credential: nil)
            #expect(noKey.status == 401, "\(noKey)")
            let rewind = try await gateway.call("rewindBroadcasts", #"{"channel":"board"}"#)
            #expect(rewind.status == 404 && rewind.error?.name == "unknownOperation", "\(rewind)")
        }
    }
}
