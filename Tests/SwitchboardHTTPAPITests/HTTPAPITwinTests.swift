import Foundation
import SwitchboardClient
@testable import SwitchboardHTTPAPI
@testable import SwitchboardServer
import SwitchboardWire
import Testing

/// Every API route against its wire twin: one script of requests, every operation the API serves with successes and
/// the errors that matter (compare-and-set conflicts, lock rules, absent targets, bad arguments), run over HTTP
/// against one gateway and over the wire against another set up the same way. Each step must give the same answer:
/// the same response body (less the times and ids the server makes up per call) or the same error code with the
/// same details, under the HTTP status the code maps to.
@Suite("The HTTP API: every route against its wire twin")
struct HTTPAPITwinTests {
    /// One request of the script and what it should give (nil: success; else the error's name).
    struct Step: Sendable, CustomStringConvertible {
        var op: String
        var body: String
        var expected: String?

        init(_ op: String, _ body: String, _ expected: String? = nil) {
            self.op = op
            self.body = body
            self.expected = expected
        }

        var description: String { "\(self.op) \(self.body)" }
    }

    /// One time for both gateways' `revokeTokens`.
    static let revokeBeforeMs = UInt64(Date().timeIntervalSince1970 * 1000)

    /// The script: every API operation at least once, in an order whose answers depend on the steps before.
    static let script: [Step] = [
        Step("setChannelMetadata", #"{"channel":"room","items":[{"key":"title","value":"hi"}],"recordUserId":true}"#),
        Step("setChannelMetadata", #"{"channel":"room","items":[{"key":"title","value":"x"}],"majorRevision":7}"#, "revisionConflict"),
        Step("setChannelMetadata", #"{"channel":"room","items":[{"key":"title","value":"x","revision":0}]}"#, "itemRevisionConflict"),
        Step("updateChannelMetadata", #"{"channel":"room","items":[{"key":"title","value":"x","revision":3}]}"#, "itemRevisionConflict"),
        Step("updateChannelMetadata", #"{"channel":"room","items":[{"key":"nope","value":"x"}]}"#, "itemNotFound"),
        Step("updateChannelMetadata", #"{"channel":"room","items":[{"key":"title","value":"there","revision":1}],"majorRevision":1}"#),
        Step("getChannelMetadata", #"{"channel":"room"}"#),
        Step("getChannelMetadata", #"{"channel":""}"#, "identifierTooLong"),
        Step("getChannelMetadata", #"{"channel":"room","channelType":"stream"}"#),
        Step("getChannelMetadata", #"{"channel":"room","colour":"red"}"#, "malformedBody"),
        Step("removeChannelMetadata", #"{"channel":"room","items":[{"key":"nope"}]}"#, "itemNotFound"),
        Step("removeChannelMetadata", #"{"channel":"room","items":[{"key":"title"}]}"#),
        Step("removeChannelMetadata", #"{"channel":"empty"}"#, "metadataNotFound"),
        Step("setUserMetadata", #"{"userId":"alice","items":[{"key":"k","value":"v"}],"majorRevision":0}"#),
        Step("setUserMetadata", #"{"userId":"alice","items":[{"key":"k","value":"v"}],"majorRevision":0}"#, "revisionConflict"),
        Step("getUserMetadata", #"{"userId":"alice"}"#),
        // Item TTLs (SB-13.1-9): the deadline is the server's (left out of the comparison), the refusal the wire's.
        Step("setUserMetadata", #"{"userId":"alice","items":[{"key":"t","value":"v","ttlMs":600000}]}"#),
        Step("setChannelMetadata", #"{"channel":"room","items":[{"key":"brief","value":"y","ttlMs":99}]}"#, "invalidTtl"),
        Step("updateUserMetadata", #"{"userId":"alice","items":[{"key":"k","value":"w"}]}"#),
        Step("updateUserMetadata", #"{"userId":"bob","items":[{"key":"k","value":"w"}]}"#, "metadataNotFound"),
        Step("removeUserMetadata", #"{"userId":"alice"}"#),
        Step("getUserMetadata", #"{"userId":"alice"}"#),
        Step("setLock", #"{"channel":"room","lockName":"edit","ttlSeconds":30}"#),
        Step("setLock", #"{"channel":"room","lockName":"edit","ttlSeconds":30}"#, "lockAlreadyExists"),
        Step("setLock", #"{"channel":"room","lockName":"fast","ttlSeconds":1}"#, "invalidLockTtl"),
        Step("setChannelMetadata", #"{"channel":"room","items":[{"key":"a","value":"1"}],"lock":"edit"}"#, "lockNotHeld"),
        Step("acquireLock", #"{"channel":"room","lockName":"edit"}"#),
        Step("acquireLock", #"{"channel":"room","lockName":"none"}"#, "lockNotFound"),
        Step("setChannelMetadata", #"{"channel":"room","items":[{"key":"a","value":"1"}],"lock":"edit"}"#),
        Step("getLocks", #"{"channel":"room"}"#),
        Step("releaseLock", #"{"channel":"room","lockName":"edit"}"#),
        Step("releaseLock", #"{"channel":"room","lockName":"edit"}"#, "lockNotHeld"),
        Step("revokeLock", #"{"channel":"room","lockName":"edit","owner":"nobody"}"#, "lockNotHeld"),
        Step("removeLock", #"{"channel":"room","lockName":"edit"}"#),
        Step("removeLock", #"{"channel":"room","lockName":"edit"}"#, "lockNotFound"),
        Step("whoNow", #"{"channel":"lobby","includeUserId":true,"includeState":true}"#),
        Step("whoNow", #"{"channel":"lobby","page":"garbage"}"#, "invalidPage"),
        Step("whereNow", #"{"userId":"alice"}"#),
        Step("getState", #"{"channel":"lobby","userId":"alice"}"#),
        Step("getState", #"{"channel":"lobby","userId":"bob"}"#, "userNotPresent"),
        Step("publishEvent", #"{"eventType":1,"value":10005,"expirySeconds":60}"#),
        Step("publishEvent", #"{"eventType":1,"value":5}"#, "reservedEventValue"),
        Step("publishEvent", #"{"eventType":9,"value":10005}"#, "unsupportedEventType"),
        Step("queryEventSubscriptions", #"{"eventType":1,"publishers":["backend"]}"#),
        // Alice is the lobby's one member: both deliver to her; the sequences are each node's own (left out).
        Step("broadcast", #"{"channel":"lobby","data":"{\"cursor\":[1,2]}"}"#),
        Step("broadcast", #"{"channel":"lobby","data":"x","echo":true,"noRewind":true}"#),
        Step("broadcast", #"{"channel":"lobby","channelType":"stream","data":"x"}"#),
        Step("broadcast", #"{"channel":"lobby","data":"\#(String(repeating: "x", count: 4097))"}"#, "broadcastTooLarge"),
        Step("broadcast", #"{"channel":"","data":"x"}"#, "invalidArgument"),
        Step("setUserInfo", #"{"info":{"userId":"alice","name":"Alice","extra":"{}"}}"#),
        Step("getUserInfo", #"{"userIds":["alice","zed"]}"#),
        Step("setGroupInfo", #"{"info":{"groupId":"g1","name":"Group one"}}"#),
        Step("getGroupInfo", #"{"groupIds":["g1","g2"]}"#),
        Step("setGroupMemberInfo", #"{"info":{"groupId":"g1","userId":"alice","nickname":"Al"}}"#),
        Step("getGroupMemberInfo", #"{"groupId":"g1","userIds":["alice","bob"]}"#),
        Step("updateGroupMembers", #"{"groupId":"g1","add":["alice","bob","carol"]}"#),
        Step("updateGroupMembers", #"{"groupId":"g1","remove":["bob"]}"#),
        Step("getGroupMembers", #"{"groupId":"g1","limit":10}"#),
        Step("getGroupMembers", #"{"groupId":"g9"}"#, "profileNotFound"),
        Step("clearProfile", #"{"kind":"group","id":"g1"}"#),
        Step("clearProfile", #"{"kind":"group","id":"g1"}"#, "profileNotFound"),
        Step("listChannels", #"{"channelType":"message"}"#),
        Step("listChannels", #"{"cursor":"garbage"}"#, "invalidPage"),
        Step("getLastSeen", #"{"userIds":["alice","nobody"]}"#),
        Step("revokeTokens", #"{"userId":"carol","issuedBeforeMs":\#(Self.revokeBeforeMs)}"#),
        Step("revokeTokens", #"{}"#, "invalidArgument"),
        Step("forceUnsubscribe", #"{"userId":"alice","channel":"lobby"}"#),
        Step("kickUser", #"{"userId":"alice","reason":"test","banSeconds":0}"#),
        Step("kickUser", #"{"userId":""}"#, "invalidArgument"),
        Step("info", #"{}"#),
    ]

    /// What a step gave: a response body, or an error.
    enum Outcome: Equatable, CustomStringConvertible {
        case success(JSONValue)
        case failure(code: UInt64, currentRevision: Int64, key: String)

        var description: String {
            switch self {
            case .success(let json): return "success \(json)"
            case .failure(let code, let revision, let key):
                return "error \(ErrorCode(rawValue: UInt32(code)).name) currentRevision=\(revision) key=\(key)"
            }
        }

        var errorName: String? {
            guard case .failure(let code, _, _) = self else { return nil }
            return ErrorCode(rawValue: UInt32(code)).name
        }
    }

    /// Alice in `lobby` (presence, state mood=ok) on the gateway: the same on both sides.
    static func setUp(_ gateway: APIGateway) async throws -> SwitchboardConnection {
        let alice = try await gateway.connect("alice")
        _ = try await alice.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby", withPresence: true)))
        _ = try await alice.send(.setState(SetStateRequest(channel: "lobby", items: [StateItem(key: "mood", value: "ok")])))
        return alice
    }

    @Test("each operation over HTTP answers as the wire answers the same request")
    func everyRouteMatchesItsWireTwin() async throws {
        let covered = Set(Self.script.map(\.op))
        let served = Set(APIOperations.all.map(\.name))
        #expect(served.subtracting(covered).isEmpty, "operations without a twin step: \(served.subtracting(covered).sorted())")

        let overHTTP: [Outcome] = try await withAPIGateway { gateway in
            let alice = try await Self.setUp(gateway)
            defer { Task { await alice.close() } }
            var outcomes: [Outcome] = []
            for step in Self.script {
                let answer = try await gateway.call(step.op, step.body)
                let outcome: Outcome
                if answer.status == 200 {
                    outcome = .success(try answer.json)
                } else {
                    let json = try answer.json
                    let code = try #require(json["code"]?.uint64Value, "\(step): \(answer)")
                    outcome = .failure(
                        code: code, currentRevision: json["currentRevision"]?.int64Value ?? -1,
                        key: json["key"]?.stringValue ?? "")
                    // The status is the code's, the name the code's name.
                    let errorCode = ErrorCode(rawValue: UInt32(code))
                    #expect(answer.status == APIOperations.status(of: errorCode), "\(step): \(answer)")
                    #expect(json["name"]?.stringValue == errorCode.name, "\(step): \(answer)")
                }
                #expect(answer.headers["content-type"] == "application/json", "\(step)")
                outcomes.append(outcome)
            }
            return outcomes
        }
        let overWire: [Outcome] = try await withAPIGateway { gateway in
            let alice = try await Self.setUp(gateway)
            defer { Task { await alice.close() } }
            // The wire twin of the API key: an admin session of the key's user.
            let backend = try await gateway.connect(APITokens.keyName, role: .admin)
            defer { Task { await backend.close() } }
            var outcomes: [Outcome] = []
            for step in Self.script {
                let op = try #require(Opcode(name: step.op))
                do {
                    let request = try Request.fromJSON(op, body: try JSONValue.parse(step.body))
                    outcomes.append(.success(try await backend.send(request).jsonBody))
                } catch let error as SwitchboardWireError {
                    outcomes.append(.failure(code: UInt64(error.code.rawValue), currentRevision: -1, key: ""))
                } catch let error as SwitchboardClientError {
                    let body = try #require(error.body, "\(step): \(error)")
                    outcomes.append(.failure(code: body.code, currentRevision: body.currentRevision, key: body.key))
                }
            }
            return outcomes
        }
        for (index, step) in Self.script.enumerated() {
            let http = overHTTP[index]
            let wire = overWire[index]
            switch (http, wire) {
            case (.success(let a), .success(let b)) where step.op == "info":
                // The wire's caller is one more session, and the rate depends on when it was asked: the counts of
                // what the script made must agree.
                for key in ["channels", "memberships", "userSubscriptions", "metadataSets", "metadataItems", "writesTotal"] {
                    #expect(a[key] == b[key], "\(step) \(key): HTTP \(a), wire \(b)")
                }
            case (.success(let a), .success(let b)):
                #expect(withoutVolatile(a) == withoutVolatile(b), "\(step): HTTP \(a), wire \(b)")
            default:
                #expect(http == wire, "\(step): HTTP \(http), wire \(wire)")
            }
            #expect(http.errorName == step.expected, "\(step): HTTP \(http)")
        }
    }
}
