import NIOCore
import SwitchboardWire
import Synchronization

/// Splits Switchboard frames off a received byte stream in place (`Protocol/SPEC.md` §2): the length varint, flags,
/// type and (responses) request id, checked as `FrameDecoder` checks them for a client that negotiated no feature.
enum SwitchboardFrameSplit {
    /// One whole frame: its class and op, and where its body lies in the bytes.
    struct FrameView: Equatable {
        var kind: FrameKind
        var op: UInt8
        var body: Range<Int>
    }

    enum Next: Equatable {
        /// A well-formed frame that ends at `end`.
        case frame(FrameView, end: Int)
        /// A whole frame whose header breaks a rule (reserved flag, a request, ERROR on anything but a response,
        /// COMPRESSED though zlib was not negotiated, a bad request id); the stream goes on at `end`.
        case malformed(end: Int)
        /// The bytes end inside a frame.
        case needMore
        /// The length field is invalid: nothing after it can be split.
        case broken
    }

    /// The frame that starts at `start`.
    static func next(in bytes: UnsafeRawBufferPointer, from start: Int, maxFrameSize: Int = FrameLimits.default.maxFrameSize) -> Next {
        var length = 0
        var index = start
        while true {
            guard index < bytes.count else { return index - start >= 4 ? .broken : .needMore }
            guard index - start < 4 else { return .broken }  // a fifth length byte
            let byte = bytes[index]
            length |= Int(byte & 0x7F) << (7 * (index - start))
            index += 1
            if byte & 0x80 == 0 {
                if byte == 0 && index - start > 1 { return .broken }  // not minimal
                break
            }
        }
        guard length >= 2, length <= maxFrameSize else { return .broken }
        let end = index + length
        guard end <= bytes.count else { return .needMore }
        let flags = bytes[index]
        let type = bytes[index + 1]
        let kind = FrameKind(rawValue: type >> 6) ?? .control
        var bodyStart = index + 2
        // No feature was negotiated, so COMPRESSED is as wrong as a reserved bit.
        guard flags & ~FrameFlags.error.rawValue == 0, kind != .request,
            flags & FrameFlags.error.rawValue == 0 || kind == .response
        else { return .malformed(end: end) }
        if kind == .response {
            var id: UInt64 = 0
            var count = 0
            while true {
                guard bodyStart < end, count < 5 else { return .malformed(end: end) }
                let byte = bytes[bodyStart]
                id |= UInt64(byte & 0x7F) << (7 * UInt64(count))
                bodyStart += 1
                count += 1
                if byte & 0x80 == 0 {
                    guard !(byte == 0 && count > 1), id != 0, id <= UInt64(UInt32.max) else { return .malformed(end: end) }
                    break
                }
            }
        }
        return .frame(FrameView(kind: kind, op: type & 0x3F, body: bodyStart..<end), end: end)
    }
}

/// A body that breaks the encoding rules (`Protocol/SPEC.md` §3).
struct MalformedBody: Error {}

/// Reads the tagged fields of a body in place, as far as the fan-out reader needs them: the checks of
/// `WireReader` (minimal varints, allowed wire types and field numbers, lengths within the body), no Strings, no
/// allocation. Positions are indices into the bytes the reader was made over.
struct BodyFields {
    let bytes: UnsafeRawBufferPointer
    private(set) var index: Int
    let end: Int

    enum WireKind: UInt8 {
        case varint = 0
        case fixed64 = 1
        case lengthDelimited = 2
        case fixed32 = 5
    }

    /// A reader over `range` of `bytes`.
    init(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) {
        self.bytes = bytes
        self.index = range.lowerBound
        self.end = range.upperBound
    }

    /// The next field's number and wire type; nil at the end.
    mutating func nextField() throws(MalformedBody) -> (number: UInt64, kind: WireKind)? {
        guard self.index < self.end else { return nil }
        let tag = try self.varint()
        guard let kind = WireKind(rawValue: UInt8(tag & 7)) else { throw MalformedBody() }
        let number = tag >> 3
        guard number > 0, number <= UInt64(UInt32.max >> 3) else { throw MalformedBody() }
        return (number, kind)
    }

    /// A minimal varint of at most 10 bytes.
    mutating func varint() throws(MalformedBody) -> UInt64 {
        var value: UInt64 = 0
        var count = 0
        while true {
            guard self.index < self.end else { throw MalformedBody() }
            let byte = self.bytes[self.index]
            self.index += 1
            count += 1
            if count == 10 && byte > 1 { throw MalformedBody() }
            value |= UInt64(byte & 0x7F) << (7 * UInt64(count - 1))
            if byte & 0x80 == 0 {
                if byte == 0 && count > 1 { throw MalformedBody() }
                return value
            }
        }
    }

    /// A varint of a field that must arrive as one (a known scalar field), checked to be of that wire type.
    mutating func varint(_ kind: WireKind) throws(MalformedBody) -> UInt64 {
        guard kind == .varint else { throw MalformedBody() }
        return try self.varint()
    }

    /// The bytes of a length-delimited field, checked to be of that wire type.
    mutating func lengthDelimited(_ kind: WireKind) throws(MalformedBody) -> Range<Int> {
        guard kind == .lengthDelimited else { throw MalformedBody() }
        let length = try self.varint()
        guard length <= UInt64(self.end - self.index) else { throw MalformedBody() }
        let range = self.index..<self.index + Int(length)
        self.index = range.upperBound
        return range
    }

    /// Skips the value of a field the reader does not look at.
    mutating func skip(_ kind: WireKind) throws(MalformedBody) {
        switch kind {
        case .varint: _ = try self.varint()
        case .lengthDelimited: _ = try self.lengthDelimited(kind)
        case .fixed64, .fixed32:
            let width = kind == .fixed64 ? 8 : 4
            guard self.end - self.index >= width else { throw MalformedBody() }
            self.index += width
        }
    }

    /// Whether the bytes of `range` are exactly `expected`.
    func equals(_ range: Range<Int>, _ expected: [UInt8]) -> Bool {
        guard range.count == expected.count else { return false }
        return expected.withUnsafeBytes { expected in
            UnsafeRawBufferPointer(rebasing: self.bytes[range]).elementsEqual(expected)
        }
    }
}

/// What one fan-out scenario makes of the pushes it waits for.
protocol SwitchboardPushAttribution: Sendable {
    /// The push code that carries the scenario's deliveries; other pushes are not looked at.
    static var pushCode: PushCode { get }
    /// Attributes the deliveries in the body of one such push.
    mutating func attribute(_ bytes: UnsafeRawBufferPointer, body: Range<Int>, subscriber: Int, at now: UInt64) throws(MalformedBody)
    /// Counts a frame that cannot be parsed.
    mutating func unexpectedReceived()
}

/// The reader's scanner for Switchboard subscribers: frames are split in place; a push of the scenario's code goes
/// to the attribution, a PING is answered with PONG, anything else a server sends (responses, PONGs, other pushes,
/// GOAWAY: the connection then closes) is passed over. A frame that cannot be parsed counts as unexpected.
struct SwitchboardFanoutScanner<Attribution: SwitchboardPushAttribution>: FanoutStreamScanner {
    var attribution: Attribution

    init(_ attribution: Attribution) {
        self.attribution = attribution
    }

    mutating func scan(_ bytes: UnsafeRawBufferPointer, subscriber: Int, at now: UInt64, replies: inout [UInt8]) -> Int? {
        var offset = 0
        while true {
            switch SwitchboardFrameSplit.next(in: bytes, from: offset) {
            case .needMore:
                return offset
            case .broken:
                self.attribution.unexpectedReceived()
                return nil
            case .malformed(let end):
                self.attribution.unexpectedReceived()
                offset = end
            case .frame(let frame, let end):
                offset = end
                do throws(MalformedBody) {
                    try self.handle(frame, in: bytes, subscriber: subscriber, at: now, replies: &replies)
                } catch {
                    self.attribution.unexpectedReceived()
                }
            }
        }
    }

    private mutating func handle(
        _ frame: SwitchboardFrameSplit.FrameView, in bytes: UnsafeRawBufferPointer, subscriber: Int, at now: UInt64,
        replies: inout [UInt8]
    ) throws(MalformedBody) {
        switch frame.kind {
        case .push where frame.op == Attribution.pushCode.rawValue:
            try self.attribution.attribute(bytes, body: frame.body, subscriber: subscriber, at: now)
        case .push, .response:
            break
        case .control:
            switch ControlOp(rawValue: frame.op) {
            case .ping:
                var fields = BodyFields(bytes, frame.body)
                var nonce: UInt64 = 0
                while let field = try fields.nextField() {
                    if field.number == 1 { nonce = try fields.varint(field.kind) } else { try fields.skip(field.kind) }
                }
                var pong = ByteBuffer()
                FrameEncoder().encode(.control(.pong(Pong(nonce: nonce))), into: &pong)
                replies.append(contentsOf: pong.readableBytesView)
            case .pong, .goAway:
                break
            case .hello, .welcome, nil:
                throw MalformedBody()  // no HELLO comes from a server, WELCOME only once, unknown control ops are fatal
            }
        case .request:
            throw MalformedBody()  // split off as malformed already
        }
    }
}

/// storage-fanout's attribution: a storage event of type set about the subject, each of its items with key
/// ``SBBench/fanoutKey`` one delivery of the ``FanoutPayload`` in its value; an item value that is no payload is
/// unexpected. Snapshots and events about anything else are passed over.
struct StorageFanoutAttribution: SwitchboardPushAttribution {
    static let pushCode = PushCode.storageEvent
    let subject: [UInt8]
    let key: [UInt8] = Array(SBBench.fanoutKey.utf8)
    var recorder: FanoutRecorder

    init(subject: String, recorder: FanoutRecorder) {
        self.subject = Array(subject.utf8)
        self.recorder = recorder
    }

    mutating func attribute(_ bytes: UnsafeRawBufferPointer, body: Range<Int>, subscriber: Int, at now: UInt64) throws(MalformedBody) {
        // StorageEvent: 1 storageType, 2 eventType (absent: snapshot), 3 target, 4 channelType, 5 majorRevision,
        // 6 items, 7 publisher, 8 timestampMs. The first pass checks the whole body and finds type and target
        // (fields may come in any order; the last occurrence wins), the second takes the items.
        var fields = BodyFields(bytes, body)
        var eventType = UInt64(StorageEventType.snapshot.rawValue)
        var target = body.lowerBound..<body.lowerBound
        while let field = try fields.nextField() {
            switch field.number {
            case 1, 4, 5, 8: _ = try fields.varint(field.kind)
            case 2: eventType = try fields.varint(field.kind)
            case 3: target = try fields.lengthDelimited(field.kind)
            case 6: _ = try self.item(bytes, try fields.lengthDelimited(field.kind))
            case 7: _ = try fields.lengthDelimited(field.kind)
            default: try fields.skip(field.kind)
            }
        }
        guard eventType == UInt64(StorageEventType.set.rawValue), fields.equals(target, self.subject) else { return }
        fields = BodyFields(bytes, body)
        while let field = try fields.nextField() {
            guard field.number == 6 else {
                try fields.skip(field.kind)
                continue
            }
            let (key, value) = try self.item(bytes, try fields.lengthDelimited(field.kind))
            guard fields.equals(key, self.key) else { continue }
            if let payload = FanoutPayload(utf8: UnsafeRawBufferPointer(rebasing: bytes[value])) {
                self.recorder.delivered(event: payload.event, subscriber: subscriber, at: now, sentAt: payload.sentAt)
            } else {
                self.recorder.unexpectedReceived()
            }
        }
    }

    /// The key and value of a MetadataItem (1 key, 2 value, 3 revision, 4 updateTs, 5 authorUserId).
    private func item(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) throws(MalformedBody) -> (key: Range<Int>, value: Range<Int>) {
        var fields = BodyFields(bytes, range)
        var key = range.lowerBound..<range.lowerBound
        var value = key
        while let field = try fields.nextField() {
            switch field.number {
            case 1: key = try fields.lengthDelimited(field.kind)
            case 2: value = try fields.lengthDelimited(field.kind)
            case 3, 4: _ = try fields.varint(field.kind)
            case 5: _ = try fields.lengthDelimited(field.kind)
            default: try fields.skip(field.kind)
            }
        }
        return (key, value)
    }

    mutating func unexpectedReceived() {
        self.recorder.unexpectedReceived()
    }
}

/// online-fanout's attribution: in a subscribedEvents batch, each online-state event (type 1) of the publisher is a
/// delivery of the round in progress, value 1 of the login round, value 2 of the logout round; any other value
/// (3: an abnormal end) is unexpected, and so is a frame that cannot be parsed (both counted with the logins).
/// Events of other publishers or types are passed over.
struct OnlineFanoutAttribution: SwitchboardPushAttribution {
    static let pushCode = PushCode.subscribedEvents
    let publisher: [UInt8]
    let rounds: OnlineRounds
    var login: FanoutRecorder
    var logout: FanoutRecorder

    init(publisher: String, rounds: OnlineRounds, login: FanoutRecorder, logout: FanoutRecorder) {
        self.publisher = Array(publisher.utf8)
        self.rounds = rounds
        self.login = login
        self.logout = logout
    }

    mutating func attribute(_ bytes: UnsafeRawBufferPointer, body: Range<Int>, subscriber: Int, at now: UInt64) throws(MalformedBody) {
        // SubscribedEvents: 1 events (repeated SubscribedEvent). SubscribedEvent: 1 eventId, 2 eventType (absent: 1),
        // 3 value, 4 publisher, 5 timestampMs, 6 expiresAtMs, 7 onlineClientTypes (repeated enum, maybe packed),
        // 8 ext.
        var batch = BodyFields(bytes, body)
        while let field = try batch.nextField() {
            guard field.number == 1 else {
                try batch.skip(field.kind)
                continue
            }
            var fields = BodyFields(bytes, try batch.lengthDelimited(field.kind))
            var eventType: UInt64 = 1
            var value: UInt64 = 0
            var publisher = fields.index..<fields.index
            while let field = try fields.nextField() {
                switch field.number {
                case 1, 8: _ = try fields.lengthDelimited(field.kind)
                case 2: eventType = try fields.varint(field.kind)
                case 3: value = try fields.varint(field.kind)
                case 4: publisher = try fields.lengthDelimited(field.kind)
                case 5, 6: _ = try fields.varint(field.kind)
                case 7 where field.kind == .varint || field.kind == .lengthDelimited: try fields.skip(field.kind)
                case 7: throw MalformedBody()
                default: try fields.skip(field.kind)
                }
            }
            guard eventType == 1, fields.equals(publisher, self.publisher) else { continue }
            switch value {
            case 1: self.login.delivered(event: self.rounds.login.load(ordering: .acquiring), subscriber: subscriber, at: now)
            case 2: self.logout.delivered(event: self.rounds.logout.load(ordering: .acquiring), subscriber: subscriber, at: now)
            default: self.login.unexpectedReceived()
            }
        }
    }

    mutating func unexpectedReceived() {
        self.login.unexpectedReceived()
    }
}
