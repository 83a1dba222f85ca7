import NIOCore
import SwitchboardDump
import SwitchboardWire
import Testing

@Suite struct ResynchronisationTests {
    static let hello = SwitchboardMessage.control(.hello(Hello(protocolVersion: 1, features: ["zlib"], userId: "Tony")))
    static let ping = SwitchboardMessage.control(.ping(Ping(nonce: 42)))
    static let request = SwitchboardMessage.request(id: 1, .getUserMetadata(GetUserMetadataRequest(userId: "Tony")))

    struct Garbage: CustomTestStringConvertible, Sendable {
        var name: String
        var bytes: [UInt8]
        var code: ErrorCode
        var testDescription: String { self.name }
    }

    static let garbage: [Garbage] = [
        Garbage(name: "length with a fifth byte", bytes: [0xFF, 0xFF, 0xFF, 0xFF, 0x0F], code: .badVarint),
        Garbage(name: "reserved flag bit", bytes: [0x03, 0x80, 0x03, 0x00], code: .badHeader),
        Garbage(name: "length 0", bytes: [0x00], code: .badHeader),
        Garbage(name: "ERROR flag on a control frame", bytes: [0x02, 0x02, 0x03], code: .badHeader),
        Garbage(name: "a stray length byte right before a frame", bytes: [0x05], code: .badHeader),
        Garbage(name: "length over the limit", bytes: [0x80, 0x80, 0x80, 0x01], code: .frameTooLarge),
        Garbage(name: "request id 0", bytes: [0x03, 0x00, 0x4D, 0x00], code: .invalidRequestId),
    ]

    @Test("garbage between frames is reported at its offset with its error, and the following frames decode",
          arguments: garbage)
    func garbageBetweenFrames(garbage: Garbage) throws {
        let first = Bytes.encode([Self.hello])
        let rest = Bytes.encode([Self.ping, Self.request])
        var stream = first
        stream.writeBytes(garbage.bytes)
        stream.writeImmutableBuffer(rest)

        let events = StreamDumper.dump(stream)
        #expect(events.count == 4, "\(events.map { TextRenderer().render($0) })")
        let problem = try #require(events.dropFirst().first?.problem)
        #expect(problem.offset == first.readableBytes)
        #expect(problem.error.code == garbage.code, "\(problem.error)")
        #expect(problem.skippedBytes == garbage.bytes.count)
        #expect(problem.resumedAt == first.readableBytes + garbage.bytes.count)
        #expect(events.compactMap(\.frame).compactMap(\.message) == [Self.hello, Self.ping, Self.request])
        #expect(events.last?.frame?.offset == first.readableBytes + garbage.bytes.count + Bytes.encode([Self.ping]).readableBytes)
    }

    @Test("garbage at the very start is skipped up to the first frame")
    func garbageAtStart() throws {
        var stream = ByteBuffer(bytes: [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01])
        stream.writeImmutableBuffer(Bytes.encode([Self.hello, Self.ping]))
        let events = StreamDumper.dump(stream)
        let problem = try #require(events.first?.problem)
        #expect(problem.offset == 0 && problem.skippedBytes == 6 && problem.resumedAt == 6)
        #expect(events.compactMap(\.frame).compactMap(\.message) == [Self.hello, Self.ping])
    }

    @Test("garbage at the end is skipped to the end, with no frame to resume at")
    func garbageAtEnd() throws {
        var stream = Bytes.encode([Self.hello])
        let size = stream.readableBytes
        stream.writeBytes([0x00, 0xFF, 0x13])
        let events = StreamDumper.dump(stream)
        let problem = try #require(events.last?.problem)
        #expect(problem.offset == size && problem.skippedBytes == 3 && problem.resumedAt == nil)
        #expect(problem.error.code == .badHeader)
    }

    @Test("a frame cut short by the end of the input is reported as truncated at its offset")
    func truncatedLastFrame() throws {
        var stream = Bytes.encode([Self.hello])
        let size = stream.readableBytes
        let ping = Bytes.encode([Self.ping])
        stream.writeImmutableBuffer(ping.getSlice(at: 0, length: 3)!)
        let events = StreamDumper.dump(stream)
        let problem = try #require(events.last?.problem)
        #expect(problem.error.code == .truncatedFrame)
        #expect(problem.offset == size && problem.skippedBytes == 3 && problem.resumedAt == nil)
        #expect(TextRenderer().render(events.last!).hasPrefix("@\(size) garbage truncatedFrame(1011)"))
    }

    @Test("a frame whose body does not decode is shown as a frame and decoding goes on without skipping")
    func undecodableBodyIsNotGarbage() throws {
        var stream = Bytes.encode([Self.hello])
        stream.writeBytes([0x03, 0x00, 0x7F, 0x04])  // request with op 63, unknown to v1
        stream.writeImmutableBuffer(Bytes.encode([Self.ping]))
        let events = StreamDumper.dump(stream)
        #expect(events.allSatisfy { $0.problem == nil })
        let frames = events.compactMap(\.frame)
        #expect(frames.count == 3)
        #expect(frames[1].opName == "unknown(63)" && frames[1].requestID == 4)
        guard case .failure(let error) = frames[1].content else {
            Issue.record("the unknown op decoded")
            return
        }
        #expect(error.code == .unknownOperation)
        #expect(frames[2].message == Self.ping)
    }

    @Test("the events do not depend on how the input is split into chunks")
    func chunkingDoesNotMatter() {
        var stream = ByteBuffer(bytes: [0x05])
        stream.writeImmutableBuffer(Bytes.encode([Self.ping, Self.hello]))
        stream.writeBytes([0xFF, 0xFF, 0x3F, 0x00, 0x02, 0x02, 0x03])
        stream.writeImmutableBuffer(Bytes.encode([Self.request, Self.ping]))
        stream.writeBytes([0x10, 0x00])
        let renderer = JSONLinesRenderer()
        let whole = StreamDumper.dump(stream).map(renderer.render)
        for chunkSize in [1, 2, 3, 5, 8, 13] {
            var dumper = StreamDumper()
            var lines: [String] = []
            for (number, start) in stride(from: 0, to: stream.readableBytes, by: chunkSize).enumerated() {
                let end = min(start + chunkSize, stream.readableBytes)
                // Alternately a fresh slice and a view into the whole buffer (reader index not at 0).
                var chunk = stream
                if number % 2 == 0 {
                    chunk = stream.getSlice(at: start, length: end - start)!
                } else {
                    chunk.moveWriterIndex(to: end)
                    chunk.moveReaderIndex(to: start)
                }
                lines += dumper.append(chunk).map(renderer.render)
            }
            lines += dumper.finish().map(renderer.render)
            #expect(lines == whole, "chunks of \(chunkSize)")
        }
    }
}
