import NIOCore
import SwitchboardFuzzing
import SwitchboardWire
import Testing

/// Seeded random round trips of every message type. A failure prints its seed; replay it with
/// `SWITCHBOARD_FUZZ_SEED=<seed> swift test --filter FuzzRoundTripTests`.
@Suite struct FuzzRoundTripTests {
    @Test func randomMessagesSurviveEncodeDecode() throws {
        let seed = fuzzSeed(1)
        var generator = RandomValueGenerator(seed: seed)
        for iteration in 0..<fuzzIterations() {
            let message = SwitchboardMessage.random(using: &generator)
            let bytes = Codec.encode(message)
            let decoded = try Codec.decodeAll(bytes)
            try #require(
                decoded == [message],
                "seed \(seed) iteration \(iteration): \(message) came back as \(decoded), bytes \(Codec.hex(bytes))")
        }
    }

    @Test func compressedRandomMessagesSurviveEncodeDecode() throws {
        let seed = fuzzSeed(2)
        var generator = RandomValueGenerator(seed: seed)
        var compressedFrames = 0
        for iteration in 0..<fuzzIterations(3_000) {
            let message = SwitchboardMessage.random(using: &generator)
            // A threshold of 1 compresses everything zlib can shrink.
            let bytes = Codec.encode(message, threshold: 1)
            var peek = bytes
            var peekDecoder = FrameDecoder()
            if let frame = try peekDecoder.decodeFrame(from: &peek), frame.header.flags.contains(.compressed) {
                compressedFrames += 1
            }
            let decoded = try Codec.decodeAll(bytes)
            try #require(decoded == [message], "seed \(seed) iteration \(iteration): \(message)")
        }
        #expect(compressedFrames > 100, "seed \(seed): only \(compressedFrames) frames were compressed")
    }

    @Test func randomMessagesSurviveJSONRendering() throws {
        let seed = fuzzSeed(3)
        var generator = RandomValueGenerator(seed: seed)
        for iteration in 0..<fuzzIterations() {
            let message = SwitchboardMessage.random(using: &generator)
            let text = message.jsonValue.description
            let parsed = try JSONValue.parse(text)
            let back = try SwitchboardMessage(json: parsed)
            try #require(back == message, "seed \(seed) iteration \(iteration): \(text)")
        }
    }

    @Test(arguments: [1, 2, 3, 7, 64, 0])
    func streamSplitIntoRandomChunksDecodesToTheSameMessages(maxChunk: Int) throws {
        let seed = fuzzSeed(4 &+ UInt64(maxChunk))
        var generator = RandomValueGenerator(seed: seed)
        var messages: [SwitchboardMessage] = []
        var stream = ByteBuffer()
        let encoder = FrameEncoder(compressionThreshold: 64)
        for _ in 0..<300 {
            let message = SwitchboardMessage.random(using: &generator)
            messages.append(message)
            encoder.encode(message, into: &stream)
        }
        var decoder = FrameDecoder()
        var pending = ByteBuffer()
        var decoded: [SwitchboardMessage] = []
        while stream.readableBytes > 0 {
            // maxChunk 0 means: random chunk sizes from 1 byte to 4 KiB.
            let limit = maxChunk == 0 ? 1 + generator.index(below: 4096) : maxChunk
            let size = min(stream.readableBytes, 1 + generator.index(below: limit))
            var chunk = stream.readSlice(length: size)!
            pending.writeBuffer(&chunk)
            while let frame = try decoder.decodeFrame(from: &pending) {
                decoded.append(try SwitchboardMessage.decode(frame))
            }
            pending.discardReadBytes()
        }
        #expect(pending.readableBytes == 0)
        #expect(decoded == messages, "seed \(seed)")
    }
}
