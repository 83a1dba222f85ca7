import Foundation
import SwitchboardClient
@testable import SwitchboardHTTPAPI
@testable import SwitchboardServer
import SwitchboardWire
import Testing

/// What the API does is what the wire sees, and back: writes over HTTP read over the wire and the other way, events
/// published over HTTP reach wire subscribers, moderation over HTTP ends and unsubscribes wire sessions.
@Suite("The HTTP API: effects seen over the wire")
struct HTTPAPIEffectTests {
    @Test("metadata set over HTTP is read over the wire, metadata set over the wire is read over HTTP, with one revision")
    func metadataBothWays() async throws {
        try await withAPIGateway { gateway in
            let alice = try await gateway.connect("alice")
            defer { Task { await alice.close() } }
            let set = try await gateway.call(
                "setChannelMetadata", #"{"channel":"room","items":[{"key":"title","value":"from http"}],"recordUserId":true}"#)
            #expect(set.status == 200, "\(set)")
            #expect(try set.json == .object([("majorRevision", .uint(1))]), "\(set)")
            guard case .getChannelMetadata(let read) = try await alice.send(.getChannelMetadata(GetChannelMetadataRequest(channel: "room"))) else {
                Issue.record("not a getChannelMetadata response")
                return
            }
            #expect(read.majorRevision == 1)
            #expect(read.items.map(\.value) == ["from http"])
            #expect(read.items.first?.authorUserId == APITokens.keyName)

            _ = try await alice.send(
                .updateChannelMetadata(
                    UpdateChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "title", value: "from wire", revision: 1)])))
            let get = try await gateway.call("getChannelMetadata", #"{"channel":"room"}"#)
            let wire = try await alice.send(.getChannelMetadata(GetChannelMetadataRequest(channel: "room")))
            #expect(try get.json == wire.jsonBody, "\(get)")
            #expect(try get.json["majorRevision"] == .uint(2))
            // A compare-and-set on the stale revision fails the same way over both.
            let stale = try await gateway.call(
                "setChannelMetadata", #"{"channel":"room","items":[{"key":"title","value":"late"}],"majorRevision":1}"#)
            #expect(stale.status == 409 && stale.error?.name == "revisionConflict", "\(stale)")
            #expect(try stale.json["currentRevision"] == .int(2), "\(stale)")
        }
    }

    @Test("a set TTL over HTTP (setTtlMs, SB-13.1-10): the answer and a wire get carry the set's expiresAtMs; a bad one is 7017")
    func setTtlOverHTTP() async throws {
        try await withAPIGateway { gateway in
            let alice = try await gateway.connect("alice")
            defer { Task { await alice.close() } }
            let set = try await gateway.call(
                "setChannelMetadata", #"{"channel":"room","items":[{"key":"k","value":"v"}],"setTtlMs":600000}"#)
            #expect(set.status == 200, "\(set)")
            let answer = try set.json
            let deadline = answer["expiresAtMs"]?.uint64Value ?? 0
            guard case .getChannelMetadata(let read) = try await alice.send(.getChannelMetadata(GetChannelMetadataRequest(channel: "room"))) else {
                Issue.record("not a getChannelMetadata response")
                return
            }
            #expect(read.expiresAtMs == deadline && deadline > UInt64(Date().timeIntervalSince1970 * 1000))
            let bad = try await gateway.call(
                "setChannelMetadata", #"{"channel":"room","items":[{"key":"k","value":"v"}],"setTtlMs":-5}"#)
            #expect(bad.error?.name == "invalidTtl", "\(bad)")
        }
    }

    @Test("an event published over HTTP reaches the wire subscribers of the key's user, storage events too")
    func publishReachesSubscribers() async throws {
        try await withAPIGateway { gateway in
            let alice = try await gateway.connect("alice", role: .admin)
            defer { Task { await alice.close() } }
            _ = try await alice.send(
                .subscribeEvent(SubscribeEventRequest(eventType: 1, expirySeconds: 60, publishers: [APITokens.keyName])))
            _ = try await alice.send(.subscribeChannel(SubscribeChannelRequest(channel: "room", withMetadata: true)))
            let published = try await gateway.call("publishEvent", #"{"eventType":1,"value":10007,"ext":"hello"}"#)
            #expect(published.status == 200, "\(published)")
            let written = try await gateway.call("setChannelMetadata", #"{"channel":"room","items":[{"key":"k","value":"v"}]}"#)
            #expect(written.status == 200, "\(written)")
            // Both pushes within 10 s (they come at once; the wait bounds a test whose pushes never come).
            let seen = try await within { () -> (event: Bool, storage: Bool)? in
                var sawEvent = false
                var sawStorage = false
                for await push in alice.pushes {
                    switch push {
                    case .subscribedEvents(let event):
                        sawEvent = sawEvent || event.events.contains {
                            $0.publisher == APITokens.keyName && $0.value == 10007 && $0.ext == "hello"
                        }
                    case .storageEvent(let event) where event.eventType == .set:
                        sawStorage = sawStorage || (event.target == "room" && event.publisher == APITokens.keyName)
                    default:
                        break
                    }
                    if sawEvent && sawStorage { break }
                }
                return (sawEvent, sawStorage)
            } ?? (false, false)
            #expect(seen.event, "no event of \(APITokens.keyName) with value 10007 reached the subscriber")
            #expect(seen.storage, "no storage event by \(APITokens.keyName) reached the member")
        }
    }

    @Test("an item written over HTTP with ttlMs answers its expiresAtMs, expires with an expired event to wire members, and a bad ttlMs is the wire's invalidTtl")
    func itemTTLOverHTTP() async throws {
        try await withAPIGateway { gateway in
            let alice = try await gateway.connect("alice")
            defer { Task { await alice.close() } }
            _ = try await alice.send(
                .subscribeChannel(SubscribeChannelRequest(channel: "room", withMetadata: true, withPresence: false)))
            let before = UInt64(Date().timeIntervalSince1970 * 1000)
            let set = try await gateway.call(
                "setChannelMetadata",
                #"{"channel":"room","items":[{"key":"typing","value":"yes","ttlMs":3000},{"key":"title","value":"t"}]}"#)
            #expect(set.status == 200, "\(set)")
            let got = try await gateway.call("getChannelMetadata", #"{"channel":"room"}"#)
            let items = try #require(try got.json["items"]?.arrayValue, "\(got)")
            let typing = try #require(items.first { $0["key"]?.stringValue == "typing" }, "\(got)")
            let deadline = try #require(typing["expiresAtMs"]?.uint64Value, "\(got)")
            #expect(deadline >= before + 3_000 && deadline <= before + 3_000 + 5_000, "\(got)")
            #expect(items.first { $0["key"]?.stringValue == "title" }?["expiresAtMs"] == nil, "\(got)")

            // The expiry reaches the wire member (within 10 s: it comes after 0.4 s; the bound ends a test where it
            // never does).
            let expired = try await within { () -> StorageEvent? in
                for await push in alice.pushes {
                    if case .storageEvent(let event) = push, event.eventType == .expired { return event }
                }
                return nil
            }
            #expect(expired?.items.map(\.key) == ["typing"], "\(String(describing: expired))")
            let after = try await gateway.call("getChannelMetadata", #"{"channel":"room"}"#)
            #expect(try after.json["items"]?.arrayValue?.compactMap { $0["key"]?.stringValue } == ["title"], "\(after)")

            let bad = try await gateway.call(
                "setUserMetadata", #"{"userId":"alice","items":[{"key":"k","value":"v","ttlMs":5}]}"#)
            #expect(bad.status == 400 && bad.error?.name == "invalidTtl", "\(bad)")
        }
    }

    @Test("kickUser over HTTP ends the user's wire sessions; forceUnsubscribe takes a channel from them")
    func moderationEndsSessions() async throws {
        try await withAPIGateway { gateway in
            let bob = try await gateway.connect("bob")
            _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
            let who = try await gateway.call("whoNow", #"{"channel":"lobby","includeUserId":true}"#)
            #expect(try who.json["totalOccupancy"] == .uint(1), "\(who)")
            let unsubscribed = try await gateway.call("forceUnsubscribe", #"{"userId":"bob","channel":"lobby"}"#)
            #expect(try unsubscribed.json == .object([("sessionsUnsubscribed", .uint(1))]), "\(unsubscribed)")
            let whoAfter = try await gateway.call("whoNow", #"{"channel":"lobby"}"#)
            #expect(try whoAfter.json["totalOccupancy"] == nil, "\(whoAfter)")
            let kicked = try await gateway.call("kickUser", #"{"userId":"bob","reason":"bye"}"#)
            #expect(try kicked.json["sessionsEnded"] == .uint(1), "\(kicked)")
            await bob.waitUntilClosed()
            #expect(!bob.isActive)
        }
    }
}
