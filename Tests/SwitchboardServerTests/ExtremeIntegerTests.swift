import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Testing

// Every integer field a client sends, at its extremes, over a real socket to a gateway with every area on SQLite
// (as `switchboard serve` runs them): each request must be answered, with success or the error code the spec names
// for that field, and never kill the process or the connection. Issue 18, item 1.

/// What the gateway must answer.
enum ExtremeAnswer: Sendable, Equatable, CustomStringConvertible {
    case success
    case error(ErrorCode)

    var description: String {
        switch self {
        case .success: return "success"
        case .error(let code): return "error \(code.rawValue)"
        }
    }
}

/// One request with one integer field at an extreme value.
struct ExtremeAttempt: Sendable {
    /// The value, for messages ("2^63", "UInt64.max").
    var label: String
    /// Requests sent first, each of which must succeed (a set to update, a lock to revoke...).
    var before: [Request] = []
    var request: Request
    /// Raw bytes appended to the encoded body: a later occurrence of a field, which wins (SB-3.2-7); used for enum
    /// numbers the typed encoder cannot write (above 2^32-1).
    var trailer: [UInt8] = []
    var expected: ExtremeAnswer
}

/// One integer field of one operation and the attempts at its extremes.
struct ExtremeField: Sendable, CustomTestStringConvertible {
    var name: String
    var attempts: [ExtremeAttempt]
    var testDescription: String { self.name }
}

/// The extreme values of each integer type, labelled.
enum Extremes {
    static let twoTo63: UInt64 = 1 << 63
    /// 0, max, max-1 and 2^63 of a `uint` (uvarint) field.
    static let uint: [(String, UInt64)] = [
        ("0", 0), ("UInt64.max", .max), ("UInt64.max-1", .max - 1), ("2^63", twoTo63),
    ]
    /// 0, max, max-1 and min of an `sint` (zigzag) field.
    static let sint: [(String, Int64)] = [
        ("0", 0), ("Int64.max", .max), ("Int64.max-1", .max - 1), ("Int64.min", .min), ("Int64.min+1", .min + 1),
    ]
    /// 0, max and max-1 of an enum (32 bits on the wire, §3.3).
    static let enumNumbers: [(String, UInt32)] = [("0", 0), ("UInt32.max", .max), ("UInt32.max-1", .max - 1)]
    /// Numbers past an enum's 32 bits, written raw: the body is malformed (`1000`) and the connection stays open.
    static let pastEnum: [(String, UInt64)] = [("2^32", 1 << 32), ("2^63", twoTo63), ("UInt64.max", .max)]

    /// `field`'s tag (wire type 0) and `value` as a varint.
    static func varintField(_ field: UInt64, _ value: UInt64) -> [UInt8] {
        var bytes: [UInt8] = []
        for var number in [field << 3, value] {
            while number >= 0x80 {
                bytes.append(UInt8(truncatingIfNeeded: number) | 0x80)
                number >>= 7
            }
            bytes.append(UInt8(number))
        }
        return bytes
    }
}

/// Builds the attempts of each field.
enum ExtremeFields {
    /// An enum field: typed numbers 0, max and max-1 get `typed`; numbers past 32 bits get `1000 malformedBody`.
    static func enumField(
        _ name: String, fieldNumber: UInt64, typed: ExtremeAnswer, before: [Request] = [],
        _ make: @escaping (UInt32) -> Request
    ) -> ExtremeField {
        var attempts = Extremes.enumNumbers.map { label, number in
            ExtremeAttempt(label: label, before: before, request: make(number), expected: typed)
        }
        attempts += Extremes.pastEnum.map { label, number in
            ExtremeAttempt(
                label: label, before: before, request: make(1), trailer: Extremes.varintField(fieldNumber, number),
                expected: .error(.malformedBody))
        }
        return ExtremeField(name: name, attempts: attempts)
    }

    static func uintField(
        _ name: String, _ expected: (UInt64) -> ExtremeAnswer, before: [Request] = [],
        _ make: @escaping (String, UInt64) -> Request
    ) -> ExtremeField {
        ExtremeField(
            name: name,
            attempts: Extremes.uint.enumerated().map { index, value in
                ExtremeAttempt(label: value.0, before: before, request: make("x\(index)", value.1), expected: expected(value.1))
            })
    }

    // MARK: Storage

    enum Scope: CaseIterable {
        case channel
        case user
    }

    enum Write: String, CaseIterable {
        case set
        case update
        case remove
    }

    /// A metadata write of `scope` `name` (a channel name or a user id).
    static func write(
        _ write: Write, _ scope: Scope, _ name: String, items: [MetadataItem], majorRevision: Int64 = -1,
        channelType: ChannelType = .message, setTtlMs: Int64 = 0
    ) -> Request {
        let channel = SetChannelMetadataRequest(
            channel: name, channelType: channelType, items: items, majorRevision: majorRevision, setTtlMs: setTtlMs)
        let user = SetUserMetadataRequest(userId: name, items: items, majorRevision: majorRevision, setTtlMs: setTtlMs)
        switch (write, scope) {
        case (.set, .channel): return .setChannelMetadata(channel)
        case (.update, .channel): return .updateChannelMetadata(channel)
        case (.remove, .channel): return .removeChannelMetadata(channel)
        case (.set, .user): return .setUserMetadata(user)
        case (.update, .user): return .updateUserMetadata(user)
        case (.remove, .user): return .removeUserMetadata(user)
        }
    }

    static let storage: [ExtremeField] = {
        var fields: [ExtremeField] = []
        for scope in Scope.allCases {
            let prefix = scope == .channel ? "ChannelMetadata" : "UserMetadata"
            for op in Write.allCases {
                let name = op.rawValue
                // Update and remove meet an existing set holding item "k" at revision 1 (the fresh set: majorRevision 1).
                let existing = op != .set
                func before(_ target: String) -> [Request] {
                    existing ? [Self.write(.set, scope, target, items: [MetadataItem(key: "k", value: "v")])] : []
                }
                // majorRevision: below -1 is 7005; else the CAS check (0 on a fresh set passes; on an existing set,
                // and any other number, it fails with 5000 since the set is at 1).
                fields.append(
                    ExtremeField(
                        name: "\(name)\(prefix).majorRevision",
                        attempts: Extremes.sint.enumerated().map { index, value in
                            let target = "mr\(index)"
                            let expected: ExtremeAnswer =
                                value.1 < -1 ? .error(.invalidRevision) : (value.1 == 0 && !existing ? .success : .error(.revisionConflict))
                            return ExtremeAttempt(
                                label: value.0, before: before(target),
                                request: Self.write(op, scope, target, items: [MetadataItem(key: "k", value: "w")], majorRevision: value.1),
                                expected: expected)
                        }))
                // An item's revision: below -1 is 7005; 0 ("must not exist") passes only for a new item; else 5001.
                fields.append(
                    ExtremeField(
                        name: "\(name)\(prefix).items.revision",
                        attempts: Extremes.sint.enumerated().map { index, value in
                            let target = "r\(index)"
                            let expected: ExtremeAnswer =
                                value.1 < -1 ? .error(.invalidRevision) : (value.1 == 0 && !existing ? .success : .error(.itemRevisionConflict))
                            return ExtremeAttempt(
                                label: value.0, before: before(target),
                                request: Self.write(op, scope, target, items: [MetadataItem(key: "k", value: "w", revision: value.1)]),
                                expected: expected)
                        }))
                // updateTs is read-only: ignored when sent.
                fields.append(
                    ExtremeField(
                        name: "\(name)\(prefix).items.updateTs",
                        attempts: Extremes.uint.enumerated().map { index, value in
                            let target = "ts\(index)"
                            return ExtremeAttempt(
                                label: value.0, before: before(target),
                                request: Self.write(op, scope, target, items: [MetadataItem(key: "k", value: "w", updateTs: value.1)]),
                                expected: .success)
                        }))
                // ttlMs: 0 is no TTL; the extremes are outside 100 ms..365 days (7017), except for remove, which
                // ignores it (SB-13.1-9).
                fields.append(
                    ExtremeField(
                        name: "\(name)\(prefix).items.ttlMs",
                        attempts: Extremes.uint.enumerated().map { index, value in
                            let target = "ttl\(index)"
                            return ExtremeAttempt(
                                label: value.0, before: before(target),
                                request: Self.write(op, scope, target, items: [MetadataItem(key: "k", value: "w", ttlMs: value.1)]),
                                expected: value.1 == 0 || op == .remove ? .success : .error(.invalidTtl))
                        }))
                // setTtlMs: 0 leaves the set's TTL; the other extremes are outside -1 and 100 ms..365 days (7017),
                // except for remove, which ignores it (SB-13.1-10).
                fields.append(
                    ExtremeField(
                        name: "\(name)\(prefix).setTtlMs",
                        attempts: Extremes.sint.enumerated().map { index, value in
                            let target = "st\(index)"
                            return ExtremeAttempt(
                                label: value.0, before: before(target),
                                request: Self.write(
                                    op, scope, target, items: [MetadataItem(key: "k", value: "w")], setTtlMs: value.1),
                                expected: value.1 == 0 || op == .remove ? .success : .error(.invalidTtl))
                        }))
                // expiresAtMs is read-only: ignored when sent.
                fields.append(
                    ExtremeField(
                        name: "\(name)\(prefix).items.expiresAtMs",
                        attempts: Extremes.uint.enumerated().map { index, value in
                            let target = "exp\(index)"
                            return ExtremeAttempt(
                                label: value.0, before: before(target),
                                request: Self.write(op, scope, target, items: [MetadataItem(key: "k", value: "w", expiresAtMs: value.1)]),
                                expected: .success)
                        }))
                if scope == .channel {
                    fields.append(
                        Self.enumField("\(name)\(prefix).channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                            Self.write(op, .channel, "ct", items: [MetadataItem(key: "k", value: "w")], channelType: ChannelType(rawValue: $0))
                        })
                }
            }
        }
        fields.append(
            Self.enumField("getChannelMetadata.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .getChannelMetadata(GetChannelMetadataRequest(channel: "ct", channelType: ChannelType(rawValue: $0)))
            })
        return fields
    }()

    // MARK: Locks

    static let locks: [ExtremeField] = {
        func type(_ number: UInt32) -> ChannelType { ChannelType(rawValue: number) }
        return [
            Self.uintField("setLock.ttlSeconds", { _ in .error(.invalidLockTtl) }) { name, ttl in
                .setLock(SetLockRequest(channel: "room", lockName: name, ttlSeconds: ttl))
            },
            Self.enumField("setLock.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .setLock(SetLockRequest(channel: "room", channelType: type($0), lockName: "mic"))
            },
            Self.enumField("acquireLock.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .acquireLock(AcquireLockRequest(channel: "room", channelType: type($0), lockName: "mic"))
            },
            Self.enumField("releaseLock.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .releaseLock(ReleaseLockRequest(channel: "room", channelType: type($0), lockName: "mic"))
            },
            Self.enumField("removeLock.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .removeLock(RemoveLockRequest(channel: "room", channelType: type($0), lockName: "mic"))
            },
            Self.enumField("revokeLock.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .revokeLock(RevokeLockRequest(channel: "room", channelType: type($0), lockName: "mic", owner: "x"))
            },
            Self.enumField("getLocks.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .getLocks(GetLocksRequest(channel: "room", channelType: type($0)))
            },
        ]
    }()

    // MARK: Channels and presence

    // An unknown channel type is 7000 before the channel is looked at (SB-13-4).

    static let presence: [ExtremeField] = {
        func type(_ number: UInt32) -> ChannelType { ChannelType(rawValue: number) }
        return [
            Self.enumField("subscribeChannel.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .subscribeChannel(SubscribeChannelRequest(channel: "lobby", channelType: type($0)))
            },
            Self.enumField("unsubscribeChannel.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .unsubscribeChannel(UnsubscribeChannelRequest(channel: "lobby", channelType: type($0)))
            },
            Self.enumField("whoNow.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .whoNow(WhoNowRequest(channel: "lobby", channelType: type($0)))
            },
            Self.enumField("setState.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .setState(SetStateRequest(channel: "lobby", channelType: type($0), items: [StateItem(key: "k", value: "v")]))
            },
            Self.enumField("getState.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .getState(GetStateRequest(channel: "lobby", channelType: type($0)))
            },
            Self.enumField("removeState.channelType", fieldNumber: 2, typed: .error(.invalidArgument)) {
                .removeState(RemoveStateRequest(channel: "lobby", channelType: type($0)))
            },
        ]
    }()

    // MARK: Events

    static let events: [ExtremeField] = [
        Self.uintField("subscribeEvent.eventType", { $0 == 1 ? .success : .error(.unsupportedEventType) }) { _, type in
            .subscribeEvent(SubscribeEventRequest(eventType: type, expirySeconds: 3_600, publishers: ["alice"]))
        },
        Self.uintField("subscribeEvent.expirySeconds", { _ in .error(.invalidExpiry) }) { _, expiry in
            .subscribeEvent(SubscribeEventRequest(expirySeconds: expiry, publishers: ["alice"]))
        },
        Self.uintField("unsubscribeEvent.eventType", { _ in .error(.unsupportedEventType) }) { _, type in
            .unsubscribeEvent(UnsubscribeEventRequest(eventType: type, publishers: ["alice"]))
        },
        Self.uintField("publishEvent.eventType", { _ in .error(.unsupportedEventType) }) { _, type in
            .publishEvent(PublishEventRequest(eventType: type, value: 10_000, onlineOnly: false))
        },
        Self.uintField("publishEvent.value (kept)", { $0 < 10_000 ? .error(.reservedEventValue) : .success }) { _, value in
            .publishEvent(PublishEventRequest(value: value, onlineOnly: false))
        },
        Self.uintField("publishEvent.value (online only)", { $0 < 10_000 ? .error(.reservedEventValue) : .success }) { _, value in
            .publishEvent(PublishEventRequest(value: value, onlineOnly: true))
        },
        Self.uintField("publishEvent.expirySeconds", { _ in .error(.invalidExpiry) }) { _, expiry in
            .publishEvent(PublishEventRequest(value: 10_000, expirySeconds: expiry, onlineOnly: false))
        },
        Self.uintField("queryEventSubscriptions.eventType", { _ in .error(.unsupportedEventType) }) { _, type in
            .queryEventSubscriptions(QueryEventSubscriptionsRequest(eventType: type, publishers: ["alice"]))
        },
    ]

    // MARK: Profiles

    static let profiles: [ExtremeField] = [
        // updatedAtMs is set by the server: whatever the client sends is replaced.
        Self.uintField("setUserInfo.info.updatedAtMs", { _ in .success }) { _, time in
            .setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "extreme", name: "E", updatedAtMs: time)))
        },
        Self.uintField("setGroupInfo.info.updatedAtMs", { _ in .success }) { name, time in
            .setGroupInfo(SetGroupInfoRequest(info: GroupInfo(groupId: name, name: "G", updatedAtMs: time)))
        },
        Self.uintField("setGroupMemberInfo.info.updatedAtMs", { _ in .success }) { name, time in
            .setGroupMemberInfo(
                SetGroupMemberInfoRequest(info: GroupMemberInfo(groupId: name, userId: "extreme", nickname: "E", updatedAtMs: time)))
        },
        Self.uintField(
            "getGroupMembers.limit", { _ in .error(.invalidArgument) },
            before: [.updateGroupMembers(UpdateGroupMembersRequest(groupId: "g", add: ["a", "b"]))]
        ) { _, limit in
            .getGroupMembers(GetGroupMembersRequest(groupId: "g", limit: limit))
        },
        Self.enumField("clearProfile.kind", fieldNumber: 1, typed: .error(.invalidArgument)) {
            .clearProfile(ClearProfileRequest(kind: ProfileKind(rawValue: $0), id: "extreme"))
        },
        Self.enumField("registerProvider.kinds", fieldNumber: 1, typed: .error(.invalidArgument)) {
            .registerProvider(RegisterProviderRequest(kinds: [ProfileKind(rawValue: $0)]))
        },
        Self.uintField("answerProvider.providerRequestId", { _ in .error(.notFound) }) { _, id in
            .answerProvider(AnswerProviderRequest(providerRequestId: id, found: true, user: UserInfo(userId: "x", updatedAtMs: id)))
        },
    ]

    static let all: [ExtremeField] = storage + locks + presence + events + profiles
}

extension RawSocket {
    /// Sends `request` as request `id`, with `trailer` appended to its body, and returns the answer; nil (after
    /// recording an issue) when the connection ended or sent something else than an answer or a push.
    func answer(to request: Request, id: UInt32, trailer: [UInt8] = [], context: String) async throws -> ExtremeAnswer? {
        let message = SwitchboardMessage.request(id: id, request)
        var body = ByteBuffer()
        message.encodeBody(into: &body)
        body.writeBytes(trailer)
        var frame = ByteBuffer()
        FrameEncoder.encodeRaw(header: message.header, body: body, into: &frame)
        self.send(frame)
        while true {
            switch try await self.next() {
            case .response(let answered, _)? where answered == id:
                return .success
            case .error(let answered, _, let error)? where answered == id:
                return .error(error.errorCode)
            case .push?, .unknownPush?, .control(.ping)?, .control(.pong)?:
                continue
            case nil:
                Issue.record("\(context): the connection ended without an answer")
                return nil
            case let other?:
                Issue.record("\(context): unexpected \(other)")
                return nil
            }
        }
    }
}

/// The gateway still serves: a new connection logs in, is answered a PING and an ordinary request.
func expectGatewayStillServes(_ gateway: RunningGateway, sourceLocation: SourceLocation = #_sourceLocation) async throws {
    let socket = try RawSocket(gateway, .tcp)
    _ = try await socket.login("after-extremes")
    socket.send(.control(.ping(Ping(nonce: 7))))
    var pong: Pong?
    while pong == nil, let message = try await socket.next() {
        if case .control(.pong(let received)) = message { pong = received }
    }
    #expect(pong?.nonce == 7, sourceLocation: sourceLocation)
    let answer = try await socket.answer(
        to: .getUserMetadata(GetUserMetadataRequest()), id: 1, context: "getUserMetadata after the extremes")
    #expect(answer == .success, sourceLocation: sourceLocation)
}

@Suite struct ExtremeIntegerTests {
    @Test(arguments: ExtremeFields.all)
    func eachIntegerFieldAtItsExtremesIsAnsweredAndTheGatewayKeepsServing(field: ExtremeField) async throws {
        try await withFullGateway { gateway in
            let socket = try RawSocket(gateway, .tcp)
            _ = try await socket.login("extreme")
            var id: UInt32 = 0
            for attempt in field.attempts {
                let context = "\(field.name) = \(attempt.label)"
                for request in attempt.before {
                    id += 1
                    let answer = try await socket.answer(to: request, id: id, context: "\(context) (before)")
                    #expect(answer == .success, "\(context): \(request.operation) before it")
                }
                id += 1
                guard
                    let answer = try await socket.answer(
                        to: attempt.request, id: id, trailer: attempt.trailer, context: context)
                else { return }
                #expect(answer == attempt.expected, "\(context)")
            }
            try await expectGatewayStillServes(gateway)
        }
    }

    /// The crash of issue 18: the kept event's value went through `Int64(_:)` in the event store, which traps for
    /// 2^63 and up and took the whole gateway down. The value is valid (10000 and up) and must arrive unchanged.
    @Test(arguments: [Extremes.twoTo63, UInt64.max - 1, UInt64.max])
    func publishEventWithAValueAboveInt64MaxIsAnsweredNotFatal(value: UInt64) async throws {
        try await withFullGateway { gateway in
            let bob = try await gateway.connect(.tcp, user: "bob")
            _ = try await bob.send(.subscribeEvent(SubscribeEventRequest(expirySeconds: 3_600, publishers: ["alice"])))
            await bob.close()
            let alice = try await gateway.connect(.tcp, user: "alice")
            let response = try await alice.send(.publishEvent(PublishEventRequest(value: value, onlineOnly: false)))
            guard case .publishEvent = response else {
                Issue.record("unexpected \(response)")
                return
            }
            // Bob, offline when it was published, gets the kept event with its value at his next login.
            let later = try await gateway.connect(.tcp, user: "bob")
            let delivered = await eventually(seconds: 5) {
                (try? await nextEvents(later, seconds: 1))?.contains { $0.publisher == "alice" && $0.value == value } == true
            }
            #expect(delivered)
            try await expectGatewayStillServes(gateway)
        }
    }

    /// A kept event with an enormous value survives a restart of the gateway unchanged.
    @Test func aKeptEventValueAboveInt64MaxSurvivesARestart() async throws {
        let place = FullGatewayPlace()
        defer { place.remove() }
        try await withFullGateway(at: place) { gateway in
            let bob = try await gateway.connect(.tcp, user: "bob")
            _ = try await bob.send(.subscribeEvent(SubscribeEventRequest(expirySeconds: 3_600, publishers: ["alice"])))
            await bob.close()
            let alice = try await gateway.connect(.tcp, user: "alice")
            _ = try await alice.send(.publishEvent(PublishEventRequest(value: .max, onlineOnly: false)))
            await alice.close()
        }
        try await withFullGateway(at: place) { gateway in
            let bob = try await gateway.connect(.tcp, user: "bob")
            let delivered = await eventually(seconds: 5) {
                (try? await nextEvents(bob, seconds: 1))?.contains { $0.publisher == "alice" && $0.value == .max } == true
            }
            #expect(delivered)
        }
    }

    @Test(arguments: Extremes.uint)
    func helloWithAnExtremeHeartbeatOrFrameSizeIsWelcomed(label: String, value: UInt64) async throws {
        try await withFullGateway { gateway in
            for hello in [
                Hello(protocolVersion: 1, userId: "h", maxFrameSize: value),
                Hello(protocolVersion: 1, userId: "h", heartbeatMs: value),
            ] {
                let socket = try RawSocket(gateway, .tcp)
                socket.send(.control(.hello(hello)))
                guard case .control(.welcome(let welcome))? = try await socket.next() else {
                    Issue.record("HELLO \(hello) = \(label): no WELCOME")
                    continue
                }
                // The interval is clamped to the server's range (§11).
                #expect((1_000...300_000).contains(welcome.heartbeatMs))
            }
            try await expectGatewayStillServes(gateway)
        }
    }

    @Test(arguments: Extremes.uint)
    func helloWithAnExtremeProtocolVersionIsRefusedWithUnsupportedVersion(label: String, value: UInt64) async throws {
        try await withFullGateway { gateway in
            let socket = try RawSocket(gateway, .tcp)
            socket.send(.control(.hello(Hello(protocolVersion: value, userId: "h"))))
            let messages = try await socket.drainUntilClosed()
            guard case .control(.goAway(let goAway))? = messages.first else {
                Issue.record("protocolVersion \(label): \(messages)")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.unsupportedVersion.rawValue))
            try await expectGatewayStillServes(gateway)
        }
    }

    @Test func helloWithAnExtremeClientTypeIsWelcomedOrRefusedAsMalformed() async throws {
        try await withFullGateway { gateway in
            for (label, number) in Extremes.enumNumbers {
                let socket = try RawSocket(gateway, .tcp)
                socket.send(.control(.hello(Hello(protocolVersion: 1, userId: "h", clientType: ClientType(rawValue: number)))))
                guard case .control(.welcome)? = try await socket.next() else {
                    Issue.record("clientType \(label): no WELCOME")
                    continue
                }
            }
            for (label, number) in Extremes.pastEnum {
                // A body error in a control frame is fatal (SB-3.2-8): GOAWAY 1000, then the server closes.
                let socket = try RawSocket(gateway, .tcp)
                let message = SwitchboardMessage.control(.hello(Hello(protocolVersion: 1, userId: "h")))
                var body = ByteBuffer()
                message.encodeBody(into: &body)
                body.writeBytes(Extremes.varintField(5, number))
                var frame = ByteBuffer()
                FrameEncoder.encodeRaw(header: message.header, body: body, into: &frame)
                socket.send(frame)
                let messages = try await socket.drainUntilClosed()
                guard case .control(.goAway(let goAway))? = messages.first else {
                    Issue.record("clientType \(label): \(messages)")
                    continue
                }
                #expect(goAway.code == UInt64(ErrorCode.malformedBody.rawValue), "clientType \(label)")
            }
            try await expectGatewayStillServes(gateway)
        }
    }

    @Test(arguments: Extremes.uint)
    func pingWithAnExtremeNonceIsAnsweredWithTheSameNonce(label: String, value: UInt64) async throws {
        try await withFullGateway { gateway in
            let socket = try RawSocket(gateway, .tcp)
            _ = try await socket.login("pinger")
            socket.send(.control(.ping(Ping(nonce: value))))
            var pong: Pong?
            while pong == nil, let message = try await socket.next() {
                if case .control(.pong(let received)) = message { pong = received }
            }
            #expect(pong?.nonce == value, "nonce \(label)")
            try await expectGatewayStillServes(gateway)
        }
    }

    /// A provider's record with an extreme `updatedAtMs` is stored with the server's time instead.
    @Test(arguments: Extremes.uint)
    func aProviderAnswerWithAnExtremeUpdatedAtIsStoredWithTheServersTime(label: String, value: UInt64) async throws {
        try await withFullGateway { gateway in
            let provider = try await gateway.connect(.tcp, user: "provider")
            _ = try await provider.send(.registerProvider(RegisterProviderRequest(kinds: [.user])))
            let serving = Task {
                for await push in provider.pushes {
                    guard case .providerRequest(let ask) = push else { continue }
                    _ = try? await provider.send(
                        .answerProvider(
                            AnswerProviderRequest(
                                providerRequestId: ask.providerRequestId, found: true,
                                user: UserInfo(userId: ask.id, name: "Far", updatedAtMs: value))))
                }
            }
            defer { serving.cancel() }
            let reader = try await gateway.connect(.tcp, user: "reader")
            let before = UInt64(Date().timeIntervalSince1970 * 1000) - 1_000
            guard case .getUserInfo(let found) = try await reader.send(.getUserInfo(GetUserInfoRequest(userIds: ["far"]))) else {
                Issue.record("unexpected response")
                return
            }
            #expect(found.users.map(\.name) == ["Far"], "updatedAtMs \(label)")
            let stored = found.users.first?.updatedAtMs ?? 0
            #expect(stored >= before && stored <= UInt64(Date().timeIntervalSince1970 * 1000) + 1_000, "updatedAtMs \(label)")
            try await expectGatewayStillServes(gateway)
        }
    }
}
