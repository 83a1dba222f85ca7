import NIOCore
import SwitchboardWire

/// Bytes the remote fuzzer sends as one frame: a valid request of some op, or one made invalid in one way.
package struct FuzzFrame: Sendable {
    /// How the frame was made.
    package enum Kind: String, Sendable, CaseIterable, Comparable {
        /// A valid request (plain or compressed).
        case valid
        /// A valid request whose integer fields are all extremes (0, 1, 2^32, 2^63, max, min, …).
        case extremeIntegers
        /// A request whose strings are 64 KiB to 1 MiB long (beyond the field limits, some beyond the frame limit).
        case overlongStrings
        /// A request whose uncompressed body is larger than the server's inflated-size limit, sent compressed.
        case compressionBomb
        /// A valid request with bits of its body flipped.
        case bitFlips
        /// A valid request with its body cut short (the length field agrees).
        case truncatedBody
        /// A valid request with a run of body bytes (often a varint) repeated in place.
        case duplicatedBytes
        /// A valid request with random fields (tag, extreme varint) appended to its body.
        case appendedFields
        /// A request body under another op number (known or not).
        case wrongOp
        /// A frame whose length field is wrong: off by a little, below 2, beyond the limit, non-minimal or too long.
        case wrongLength
        /// The COMPRESSED flag on a body that is not a valid `uvarint(length) || zlib` pair.
        case compressedGarbage
        /// Reserved flag bits, or the ERROR flag on a request.
        case badFlags
        /// A control frame from a client: HELLO again, PING, or ones only a server sends.
        case control
        /// A response or push frame from a client.
        case wrongDirection
        /// A few random bytes.
        case randomBytes

        package static func < (lhs: Kind, rhs: Kind) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    /// How the frame was made.
    package var kind: Kind
    /// The op of the request it was built from, if any.
    package var op: Opcode?
    /// The bytes on the wire.
    package var bytes: [UInt8]
}

/// Makes the remote fuzzer's frames from a seed: valid requests of every op, built from the schema's random values
/// (`Generated/RandomValues.swift`) over a small set of shared names, and the same requests damaged in the ways of
/// ``FuzzFrame/Kind``. The sequence of frames is a function of the seed alone.
package struct FuzzFrameFactory: Sendable {
    /// The generator every choice comes from.
    package var generator: RandomValueGenerator

    /// Creates a factory whose frames follow from `seed`; `names` are the channel names, keys and user ids requests
    /// mostly use (include the fuzzing users' ids, so that requests act on their own data).
    package init(seed: UInt64, names: [String]) {
        self.generator = RandomValueGenerator(seed: seed)
        self.generator.names = names
    }

    /// The next frame.
    package mutating func next() -> FuzzFrame {
        let roll = self.generator.index(below: 1000)
        switch roll {
        case 0..<350: return self.valid(compressed: self.generator.index(below: 8) == 0)
        case 350..<450: return self.extremeIntegers()
        case 450..<460: return self.overlongStrings()
        case 460..<465: return self.compressionBomb()
        case 465..<545: return self.bitFlips()
        case 545..<605: return self.truncatedBody()
        case 605..<665: return self.duplicatedBytes()
        case 665..<725: return self.appendedFields()
        case 725..<775: return self.wrongOp()
        case 775..<815: return self.wrongLength()
        case 815..<855: return self.compressedGarbage()
        case 855..<880: return self.badFlags()
        case 880..<940: return self.control()
        case 940..<975: return self.wrongDirection()
        default: return self.randomBytes()
        }
    }

    // MARK: - Valid requests

    /// A request id: mostly small (so ids repeat while requests are in flight), sometimes 0 or the largest.
    private mutating func requestID() -> UInt32 {
        switch self.generator.index(below: 20) {
        case 0: return 0
        case 1: return UInt32.max
        case 2: return UInt32(truncatingIfNeeded: self.generator.rng.next())
        default: return 1 + UInt32(self.generator.index(below: 500))
        }
    }

    /// A random request of a random op, whose op is then the request's.
    private mutating func request() -> Request {
        Request.random(using: &self.generator)
    }

    /// A request as a typed message plus its plain body and header.
    private mutating func requestParts(_ request: Request) -> (header: FrameHeader, body: [UInt8]) {
        let message = SwitchboardMessage.request(id: self.requestID(), request)
        var body = ByteBuffer()
        message.encodeBody(into: &body)
        return (message.header, Array(body.readableBytesView))
    }

    private mutating func valid(compressed: Bool) -> FuzzFrame {
        let request = self.request()
        if compressed {
            var bytes = ByteBuffer()
            FrameEncoder(compressionThreshold: 1).encode(.request(id: self.requestID(), request), into: &bytes)
            return FuzzFrame(kind: .valid, op: request.operation, bytes: Array(bytes.readableBytesView))
        }
        let parts = self.requestParts(request)
        return FuzzFrame(kind: .valid, op: request.operation, bytes: Self.frame(parts.header, body: parts.body))
    }

    private mutating func extremeIntegers() -> FuzzFrame {
        self.generator.extremeIntegers = true
        defer { self.generator.extremeIntegers = false }
        var frame = self.valid(compressed: false)
        frame.kind = .extremeIntegers
        return frame
    }

    private mutating func overlongStrings() -> FuzzFrame {
        // One long string per frame (the first string field the request sets): 1 MiB is beyond the frame limit already.
        self.generator.overlongStringsLeft = 1
        defer { self.generator.overlongStringsLeft = 0 }
        var frame = self.valid(compressed: false)
        frame.kind = .overlongStrings
        return frame
    }

    private mutating func compressionBomb() -> FuzzFrame {
        let size = (1 << 20) + 1 + self.generator.index(below: 3 << 20)
        let request = Request.setUserMetadata(
            SetUserMetadataRequest(userId: "fuzz-0", items: [MetadataItem(key: "bomb", value: String(repeating: "z", count: size))]))
        var bytes = ByteBuffer()
        FrameEncoder(compressionThreshold: 1, compressionLevel: 9).encode(.request(id: self.requestID(), request), into: &bytes)
        return FuzzFrame(kind: .compressionBomb, op: request.operation, bytes: Array(bytes.readableBytesView))
    }

    // MARK: - Damaged bodies

    private mutating func bitFlips() -> FuzzFrame {
        let request = self.request()
        var parts = self.requestParts(request)
        if parts.body.isEmpty { parts.body = [0] }
        for _ in 0..<(1 + self.generator.index(below: 4)) {
            parts.body[self.generator.index(below: parts.body.count)] ^= UInt8(1) << UInt8(self.generator.index(below: 8))
        }
        return FuzzFrame(kind: .bitFlips, op: request.operation, bytes: Self.frame(parts.header, body: parts.body))
    }

    private mutating func truncatedBody() -> FuzzFrame {
        let request = self.request()
        var parts = self.requestParts(request)
        parts.body = Array(parts.body.prefix(self.generator.index(below: parts.body.count + 1)))
        return FuzzFrame(kind: .truncatedBody, op: request.operation, bytes: Self.frame(parts.header, body: parts.body))
    }

    private mutating func duplicatedBytes() -> FuzzFrame {
        let request = self.request()
        var parts = self.requestParts(request)
        if !parts.body.isEmpty {
            let start = self.generator.index(below: parts.body.count)
            let end = min(parts.body.count, start + 1 + self.generator.index(below: 10))
            let copies = 1 + self.generator.index(below: 3)
            let run = Array(parts.body[start..<end])
            parts.body.insert(contentsOf: Array(repeating: run, count: copies).joined(), at: end)
        }
        return FuzzFrame(kind: .duplicatedBytes, op: request.operation, bytes: Self.frame(parts.header, body: parts.body))
    }

    private mutating func appendedFields() -> FuzzFrame {
        let request = self.request()
        var parts = self.requestParts(request)
        for _ in 0..<(1 + self.generator.index(below: 3)) {
            // A known field number, or an unknown one (some beyond 2^29); then an extreme value.
            let field = UInt64(self.generator.index(below: 4) == 0 ? self.generator.uint64() >> 3 : UInt64(1 + self.generator.index(below: 12)))
            // Half of them varints: a known varint field's last occurrence wins, so its value becomes the extreme.
            let wireType = self.generator.bool() ? 0 : UInt64(self.generator.index(below: 8))
            parts.body += Self.varint(field << 3 | wireType)
            parts.body += Self.varint(RandomValueGenerator.extremeUnsigned[self.generator.index(below: RandomValueGenerator.extremeUnsigned.count)])
        }
        return FuzzFrame(kind: .appendedFields, op: request.operation, bytes: Self.frame(parts.header, body: parts.body))
    }

    private mutating func wrongOp() -> FuzzFrame {
        let request = self.request()
        var parts = self.requestParts(request)
        let op: UInt8 =
            self.generator.bool()
            ? Opcode.allCases[self.generator.index(below: Opcode.allCases.count)].rawValue
            : UInt8(self.generator.index(below: 64))
        parts.header.op = op
        return FuzzFrame(kind: .wrongOp, op: Opcode(rawValue: op), bytes: Self.frame(parts.header, body: parts.body))
    }

    // MARK: - Damaged headers

    private mutating func wrongLength() -> FuzzFrame {
        let request = self.request()
        let parts = self.requestParts(request)
        let plain = Self.frame(parts.header, body: parts.body)
        var rest = Array(plain.dropFirst(Self.lengthFieldSize(plain)))
        let actual = UInt64(rest.count)
        var length: [UInt8]
        switch self.generator.index(below: 7) {
        case 0: length = Self.varint(actual + 1 + UInt64(self.generator.index(below: 16)))  // the next frame's bytes become this body
        case 1: length = Self.varint(actual > 2 ? actual - 1 - UInt64(self.generator.index(below: Int(actual) - 2)) : 0)
        case 2: length = Self.varint(UInt64(self.generator.index(below: 2)))  // below the smallest frame
        case 3: length = Self.varint([1 << 20 + 1, 16 << 20, 268_435_455][self.generator.index(below: 3)])  // beyond the limit
        case 4:  // non-minimal: the last byte's continuation bit set, then a zero byte
            length = Self.varint(actual)
            length[length.count - 1] |= 0x80
            length.append(0)
        case 5: length = [0xFF, 0xFF, 0xFF, 0xFF, 0x0F]  // a fifth length byte
        default:
            length = Self.varint(actual)
            rest = Array(rest.prefix(self.generator.index(below: rest.count + 1)))  // ends early; the next frame fills it
        }
        return FuzzFrame(kind: .wrongLength, op: request.operation, bytes: length + rest)
    }

    private mutating func compressedGarbage() -> FuzzFrame {
        let request = self.request()
        let id = self.requestID()
        var compressed = ByteBuffer()
        FrameEncoder(compressionThreshold: 1).encode(.request(id: id, request), into: &compressed)
        let encoded = Array(compressed.readableBytesView)
        var header = FrameHeader(kind: .request, op: request.operation.rawValue, flags: .compressed, requestID: id)
        var body: [UInt8]
        switch self.generator.index(below: 4) {
        case 0:  // the real compressed body with bits flipped
            body = Array(encoded.dropFirst(Self.lengthFieldSize(encoded) + 2 + Self.varint(UInt64(id)).count))
            for _ in 0..<(1 + self.generator.index(below: 4)) where !body.isEmpty {
                body[self.generator.index(below: body.count)] ^= UInt8(1) << UInt8(self.generator.index(below: 8))
            }
        case 1:  // an extreme inflated length in front of random bytes
            body = Self.varint(RandomValueGenerator.extremeUnsigned[self.generator.index(below: RandomValueGenerator.extremeUnsigned.count)])
            body += self.randomBytes(count: self.generator.index(below: 64))
        case 2:  // the plain body, not compressed at all
            body = self.requestParts(request).body
        default:  // nothing
            body = []
        }
        if self.generator.index(below: 4) == 0 { header.kind = [.control, .response, .push][self.generator.index(below: 3)] }
        return FuzzFrame(kind: .compressedGarbage, op: request.operation, bytes: Self.frame(header, body: body))
    }

    private mutating func badFlags() -> FuzzFrame {
        let request = self.request()
        let parts = self.requestParts(request)
        var bytes = Self.frame(parts.header, body: parts.body)
        let flagsAt = Self.lengthFieldSize(bytes)
        bytes[flagsAt] = self.generator.bool() ? 0x02 : UInt8(4 << self.generator.index(below: 6)) | UInt8(self.generator.index(below: 4))
        return FuzzFrame(kind: .badFlags, op: request.operation, bytes: bytes)
    }

    private mutating func control() -> FuzzFrame {
        let message: SwitchboardMessage
        switch self.generator.index(below: 4) {
        case 0: message = .control(.ping(Ping(nonce: self.generator.uint64())))
        case 1:
            var hello = Hello.random(using: &self.generator)
            if self.generator.bool() { hello.protocolVersion = 1 }
            message = .control(.hello(hello))
        case 2: message = .control(.random(using: &self.generator))
        default:
            let op = UInt8(6 + self.generator.index(below: 58))  // a control op nobody defined
            let body = self.randomBytes(count: self.generator.index(below: 16))
            return FuzzFrame(kind: .control, op: nil, bytes: Self.frame(FrameHeader(kind: .control, op: op), body: body))
        }
        var bytes = ByteBuffer()
        FrameEncoder().encode(message, into: &bytes)
        return FuzzFrame(kind: .control, op: nil, bytes: Array(bytes.readableBytesView))
    }

    private mutating func wrongDirection() -> FuzzFrame {
        let message: SwitchboardMessage
        switch self.generator.index(below: 3) {
        case 0: message = .response(id: self.requestID(), .random(using: &self.generator))
        case 1:
            let op = Opcode.allCases[self.generator.index(below: Opcode.allCases.count)].rawValue
            message = .error(id: self.requestID(), op: op, ErrorBody(code: self.generator.uint64(), message: self.generator.string()))
        default: message = .push(.random(using: &self.generator))
        }
        var bytes = ByteBuffer()
        FrameEncoder().encode(message, into: &bytes)
        return FuzzFrame(kind: .wrongDirection, op: nil, bytes: Array(bytes.readableBytesView))
    }

    private mutating func randomBytes() -> FuzzFrame {
        FuzzFrame(kind: .randomBytes, op: nil, bytes: self.randomBytes(count: 1 + self.generator.index(below: 64)))
    }

    private mutating func randomBytes(count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8(truncatingIfNeeded: self.generator.rng.next()) }
    }

    // MARK: - Encoding

    /// `value` as an unsigned LEB128 varint (`Protocol/SPEC.md` §3.1).
    package static func varint(_ value: UInt64) -> [UInt8] {
        var value = value
        var bytes: [UInt8] = []
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
        return bytes
    }

    /// A frame with a correct length field: `Length || Flags || Type || RequestId || Body` (`Protocol/SPEC.md` §2).
    package static func frame(_ header: FrameHeader, body: [UInt8]) -> [UInt8] {
        var rest = [header.flags.rawValue, header.typeByte]
        if header.kind.hasRequestID { rest += Self.varint(UInt64(header.requestID)) }
        rest += body
        return Self.varint(UInt64(rest.count)) + rest
    }

    /// The size of the length field at the start of `frame` (its bytes up to the first without the continuation bit).
    static func lengthFieldSize(_ frame: [UInt8]) -> Int {
        (frame.firstIndex { $0 & 0x80 == 0 } ?? 0) + 1
    }
}
