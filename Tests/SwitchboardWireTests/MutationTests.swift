import NIOCore
import SwitchboardFuzzing
import SwitchboardWire
import Testing

/// Damaged input must give a typed error (or, for a prefix, a request for more bytes), never a crash, a hang or an
/// allocation beyond the limits.
@Suite struct MutationTests {
    /// Runs the decoder over `bytes` to the end; returns the error, if any. Crashing is the failure mode under test.
    @discardableResult
    static func feed(_ bytes: ByteBuffer, limits: FrameLimits = .default) -> SwitchboardWireError? {
        var decoder = FrameDecoder(limits: limits)
        var buffer = bytes
        do throws(SwitchboardWireError) {
            while let frame = try decoder.decodeFrame(from: &buffer) {
                _ = try SwitchboardMessage.decode(frame)
            }
        } catch {
            return error
        }
        return nil
    }

    @Test func truncationAtEveryOffsetWaitsForMoreBytes() throws {
        let seed = fuzzSeed(10)
        var generator = RandomValueGenerator(seed: seed)
        for _ in 0..<300 {
            let message = SwitchboardMessage.random(using: &generator)
            let bytes = Codec.encode(message, threshold: generator.bool() ? 1 : nil)
            for cut in 0..<bytes.readableBytes {
                var prefix = bytes.getSlice(at: bytes.readerIndex, length: cut)!
                var decoder = FrameDecoder()
                // A strict prefix of a valid frame is never a frame and never an error: the decoder waits.
                let frame = try decoder.decodeFrame(from: &prefix)
                try #require(frame == nil, "seed \(seed): prefix of \(cut) bytes decoded to a frame")
                try #require(prefix.readableBytes == cut, "seed \(seed): prefix bytes were consumed")
            }
            // At end of stream a prefix is a truncated frame.
            var decoder = FrameDecoder()
            var prefix = bytes.getSlice(at: bytes.readerIndex, length: bytes.readableBytes - 1)!
            #expect(throws: SwitchboardWireError.self) { _ = try decoder.decodeLast(buffer: &prefix, seenEOF: true) }
        }
    }

    @Test func bitFlipsGiveTypedErrorsOrValidMessages() {
        let seed = fuzzSeed(11)
        var generator = RandomValueGenerator(seed: seed)
        var errors = 0
        for _ in 0..<fuzzIterations() {
            let message = SwitchboardMessage.random(using: &generator)
            var bytes = Codec.encode(message, threshold: generator.index(below: 4) == 0 ? 1 : nil)
            for _ in 0..<(1 + generator.index(below: 3)) {
                let offset = generator.index(below: bytes.readableBytes)
                let bit = UInt8(1) << UInt8(generator.index(below: 8))
                let byte = bytes.getInteger(at: offset, as: UInt8.self)!
                bytes.setInteger(byte ^ bit, at: offset)
            }
            if Self.feed(bytes) != nil { errors += 1 }
        }
        #expect(errors > 0, "seed \(seed)")
    }

    @Test func randomBytesGiveTypedErrors() {
        let seed = fuzzSeed(12)
        var generator = RandomValueGenerator(seed: seed)
        for _ in 0..<fuzzIterations() {
            var bytes = ByteBuffer()
            for _ in 0..<generator.index(below: 64) {
                bytes.writeInteger(UInt8.random(in: 0...255, using: &generator.rng))
            }
            Self.feed(bytes)
        }
    }

    @Test func randomBodiesUnderValidHeadersGiveTypedErrors() {
        // Valid header, garbage body: exercises every field decoder with hostile input.
        let seed = fuzzSeed(13)
        var generator = RandomValueGenerator(seed: seed)
        for _ in 0..<fuzzIterations() {
            var body = ByteBuffer()
            for _ in 0..<generator.index(below: 48) {
                body.writeInteger(UInt8.random(in: 0...255, using: &generator.rng))
            }
            let kind = FrameKind.allCases[generator.index(below: 4)]
            let op = UInt8(generator.index(below: 64))
            let header = FrameHeader(kind: kind, op: op, requestID: kind.hasRequestID ? 7 : 0)
            var frame = ByteBuffer()
            FrameEncoder.encodeRaw(header: header, body: body, into: &frame)
            if let error = Self.feed(frame), kind == .request, error.code != .badHeader {
                // A body error in a well-framed request must name the request so the server can answer it.
                #expect(error.requestID == 7, "seed \(seed): \(error)")
            }
        }
    }

    @Test func forgedLengthOverTheLimitIsRejectedBeforeTheBodyArrives() {
        var bytes = ByteBuffer()
        bytes.writeSwitchboardVarint(268_435_455)  // 2^28-1: legal encoding, far over 1 MiB
        bytes.writeBytes([0x00, 0x4C, 0x01])
        let error = Self.feed(bytes)
        #expect(error?.code == .frameTooLarge)
    }

    @Test(arguments: [
        ([0x80, 0x80, 0x80, 0x80, 0x01], ErrorCode.badVarint),  // five-byte length
        ([0x85, 0x00, 0x00, 0x4C, 0x01], ErrorCode.badVarint),  // overlong length (5 encoded in two bytes)
        ([0x01, 0x00], ErrorCode.badHeader),  // length 1: shorter than a header
        ([0x03, 0x04, 0x4C, 0x01], ErrorCode.badHeader),  // reserved flag
        ([0x03, 0x02, 0x4C, 0x01], ErrorCode.badHeader),  // ERROR flag on a request
        ([0x03, 0x00, 0x4C, 0x00], ErrorCode.invalidRequestId),  // request id 0
        ([0x04, 0x00, 0x4C, 0x81, 0x00], ErrorCode.badVarint),  // overlong request id
        ([0x02, 0x00, 0x4C], ErrorCode.badHeader),  // request id missing
        ([0x02, 0x00, 0x3E], ErrorCode.badHeader),  // unknown control op
        ([0x03, 0x00, 0x66, 0x01], ErrorCode.unknownOperation),  // unknown request op 0x26
        ([0x05, 0x00, 0x4C, 0x01, 0x0B, 0x00], ErrorCode.malformedBody),  // wire type 3
        ([0x05, 0x00, 0x4C, 0x01, 0x0A, 0x05], ErrorCode.malformedBody),  // string length past the body
        ([0x07, 0x00, 0x4C, 0x01, 0x0A, 0x02, 0xC3, 0x28], ErrorCode.invalidUtf8),
        ([0x06, 0x00, 0x4C, 0x01, 0x20, 0x80, 0x00], ErrorCode.malformedBody),  // overlong body varint
        ([0x05, 0x00, 0x4C, 0x01, 0x20, 0x02], ErrorCode.malformedBody),  // bool 2 (recordTs)
    ] as [([UInt8], ErrorCode)])
    func malformedHeaderOrBodyIsTheSpecifiedError(bytes: [UInt8], code: ErrorCode) {
        let error = Self.feed(ByteBuffer(bytes: bytes))
        #expect(error?.code == code, "\(bytes) gave \(String(describing: error))")
    }

    @Test func compressionBombIsRefusedBeforeInflating() {
        // Declares 2 MiB inflated against a 1 MiB limit.
        var plain = ByteBuffer(repeating: 0, count: 2 << 20)
        var zlib = ByteBuffer()
        Zlib.deflate(plain, into: &zlib)
        var body = ByteBuffer()
        body.writeSwitchboardVarint(UInt64(plain.readableBytes))
        body.writeBuffer(&zlib)
        var frame = ByteBuffer()
        FrameEncoder.encodeRaw(
            header: FrameHeader(kind: .push, op: 4, flags: .compressed), body: body, into: &frame)
        #expect(Self.feed(frame)?.code == .inflatedTooLarge)
        plain.clear()
    }

    @Test func compressionBombThatLiesAboutItsSizeStopsAtTheDeclaredSize() {
        // Declares 100 bytes; the stream inflates to 2 MiB. Inflation must stop at 101 bytes and fail.
        let plain = ByteBuffer(repeating: 0, count: 2 << 20)
        var zlib = ByteBuffer()
        Zlib.deflate(plain, into: &zlib)
        var body = ByteBuffer()
        body.writeSwitchboardVarint(100)
        body.writeBuffer(&zlib)
        var frame = ByteBuffer()
        FrameEncoder.encodeRaw(
            header: FrameHeader(kind: .push, op: 4, flags: .compressed), body: body, into: &frame)
        #expect(Self.feed(frame)?.code == .badCompression)
    }

    @Test func damagedCompressedBodiesAreBadCompression() throws {
        let message = SwitchboardMessage.push(
            .subscribedEvents(SubscribedEvents(events: [SubscribedEvent(eventId: "e", value: 10_001, ext: String(repeating: "x", count: 2000))])))
        let bytes = Codec.encode(message, threshold: 1)
        var peek = bytes
        var peekDecoder = FrameDecoder()
        let frame = try #require(try peekDecoder.decodeFrame(from: &peek))
        try #require(frame.header.flags.contains(.compressed))
        // Corrupt each byte of the zlib stream in turn (skip the length, flags, type and inflated-length bytes).
        var failures = 0
        for offset in 6..<bytes.readableBytes {
            var damaged = bytes
            damaged.setInteger(damaged.getInteger(at: offset, as: UInt8.self)! ^ 0x55, at: offset)
            if let error = Self.feed(damaged) {
                #expect([ErrorCode.badCompression, .malformedBody, .invalidUtf8].contains(error.code))
                failures += 1
            }
        }
        #expect(failures > bytes.readableBytes / 2)
        // Trailing garbage after the stream.
        var body = ByteBuffer()
        var plain = ByteBuffer()
        message.encodeBody(into: &plain)
        body.writeSwitchboardVarint(UInt64(plain.readableBytes))
        Zlib.deflate(plain, into: &body)
        body.writeBytes([1, 2, 3])
        var trailing = ByteBuffer()
        FrameEncoder.encodeRaw(header: FrameHeader(kind: .push, op: 4, flags: .compressed), body: body, into: &trailing)
        #expect(Self.feed(trailing)?.code == .badCompression)
    }

    @Test func compressedFrameWithoutNegotiationIsRejected() {
        let message = SwitchboardMessage.push(.serverNotice(ServerNotice(message: String(repeating: "a", count: 600))))
        let bytes = Codec.encode(message, threshold: 1)
        let limits = FrameLimits(maxFrameSize: 1 << 20, maxInflatedSize: 1 << 20, compressionEnabled: false)
        #expect(Self.feed(bytes, limits: limits)?.code == .compressionNotNegotiated)
    }
}

/// The codec's own UTF-8 validator must agree with the standard library's on every input.
@Suite struct UTF8ValidationTests {
    @Test func stringFieldsAreRejectedExactlyWhenTheyAreNotUTF8() throws {
        let seed = fuzzSeed(14)
        var generator = RandomValueGenerator(seed: seed)
        let interesting: [UInt8] = [0x00, 0x41, 0x7F, 0x80, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF, 0x9F, 0xA0, 0x8F, 0x90]
        for _ in 0..<fuzzIterations(50_000) {
            var bytes: [UInt8] = []
            for _ in 0..<generator.index(below: 12) {
                bytes.append(generator.bool() ? interesting[generator.index(below: interesting.count)] : UInt8.random(in: 0...255, using: &generator.rng))
            }
            var body = ByteBuffer()
            body.writeInteger(UInt8(0x0A))  // field 1, length-delimited
            body.writeSwitchboardVarint(UInt64(bytes.count))
            body.writeBytes(bytes)
            let expected = String(validating: bytes, as: UTF8.self)
            do {
                let decoded = try GetUserMetadataRequest(decoding: body)
                try #require(expected == decoded.userId, "seed \(seed): \(bytes) decoded as \(decoded.userId)")
            } catch {
                try #require(expected == nil && (error as? SwitchboardWireError)?.code == .invalidUtf8, "seed \(seed): \(bytes) gave \(error)")
            }
        }
    }
}
