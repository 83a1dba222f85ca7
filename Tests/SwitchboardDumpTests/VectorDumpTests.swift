import Foundation
import NIOCore
import SwitchboardDump
import SwitchboardWire
import Testing

/// Every vector of `Protocol/vectors`, through the dump library, from binary input and from commented hex text.
@Suite struct VectorDumpTests {
    @Test("the five vector files are found and hold vectors of both layers")
    func vectorFilesArePresent() {
        #expect(Vector.all.count > 300, "found \(Vector.all.count) vectors in \(Vector.directory.path)")
        for file in Vector.files {
            #expect(!Vector.load(file).isEmpty, "\(file) is missing or empty")
        }
        #expect(!Vector.sessionLayer.isEmpty)
    }

    /// Dumps the vector's bytes as given, and again from commented hex text fed in 7-byte chunks.
    static func dumps(_ vector: Vector) throws -> [(input: String, events: [DumpEvent])] {
        let binary = Bytes.fromHex(vector.hex)
        let binaryEvents = StreamDumper.dump(binary, limits: vector.limits, direction: vector.direction)

        var hexDecoder = HexTextDecoder()
        var dumper = StreamDumper(limits: vector.limits, direction: vector.direction)
        var hexEvents: [DumpEvent] = []
        let text = Array(Bytes.commentedHex(binary).utf8)
        for start in stride(from: 0, to: text.count, by: 7) {
            var chunk = ByteBuffer()
            try hexDecoder.decode(text[start..<min(start + 7, text.count)], into: &chunk)
            hexEvents += dumper.append(chunk)
        }
        try hexDecoder.finish()
        hexEvents += dumper.finish()
        return [("binary", binaryEvents), ("hex", hexEvents)]
    }

    @Test("each valid frame and stream vector dumps as its messages, and their JSON lines carry the spec rendering",
          arguments: Vector.frameLayer.filter { $0.expectedMessages != nil })
    func validVectorDumpsAsItsMessages(vector: Vector) throws {
        let expected = try #require(vector.expectedMessages)
        for (input, events) in try Self.dumps(vector) {
            let frames = events.compactMap(\.frame)
            #expect(events.allSatisfy { $0.problem == nil }, "\(input): \(events.map { TextRenderer().render($0) })")
            #expect(frames.count == expected.count, "\(input)")
            for (frame, message) in zip(frames, expected) {
                let decoded = try #require(frame.message, "\(input): \(TextRenderer().render(DumpEvent(.frame(frame))))")
                #expect(decoded == (try SwitchboardMessage(json: message)), "\(input)")
                #expect(decoded.jsonValue == message, "\(input): rendered \(decoded.jsonValue)")
                // The vectors' HELLO tokens as they are: the JSON lines must carry the spec rendering unchanged.
                let line = JSONLinesRenderer(showsTokens: true).render(DumpEvent(.frame(frame)))
                let parsed = try JSONValue.parse(line)
                #expect(parsed["message"] == message, "\(input): \(line)")
                #expect(parsed["event"] == .string("frame"))
            }
            // Frames tile the input: each starts where the previous ended.
            var offset = 0
            for frame in frames {
                #expect(frame.offset == offset)
                offset += frame.wireSize
            }
            #expect(offset == Bytes.fromHex(vector.hex).readableBytes)
        }
    }

    @Test("each malformed frame-layer vector reports the expected error first, as fatal or for its request id alone",
          arguments: Vector.frameLayer.filter { $0.json["expectError"] != nil })
    func malformedVectorReportsItsError(vector: Vector) throws {
        let expected = try #require(vector.json["expectError"])
        for (input, events) in try Self.dumps(vector) {
            let first = try #require(
                events.first { $0.reportedError != nil }, "\(input): no error reported, expected \(expected)")
            let error = try #require(first.reportedError)
            #expect(UInt64(error.code.rawValue) == expected["code"]?.uint64Value, "\(input): \(error)")
            if let id = expected["requestId"]?.uint64Value {
                let frame = try #require(first.frame, "\(input): a request-level error is reported on its frame")
                #expect(frame.requestID.map(UInt64.init) == id, "\(input)")
                #expect(error.keepsConnectionOpen, "\(input): \(error)")
            } else {
                #expect(!error.keepsConnectionOpen, "\(input): \(error) should be fatal")
            }
        }
    }

    @Test("session-layer vectors are cut into frames without garbage, and a reused request id is flagged",
          arguments: Vector.sessionLayer)
    func sessionVectorIsFramed(vector: Vector) throws {
        // Session rules (HELLO first, versions, pre-handshake limits) are the gateway's to enforce; at the frame layer
        // every byte of these vectors belongs to a frame, whatever the session state.
        let bytes = Bytes.fromHex(vector.hex)
        let events = StreamDumper.dump(bytes, direction: vector.direction)
        #expect(events.allSatisfy { $0.problem == nil }, "\(events.map { TextRenderer().render($0) })")
        #expect(events.compactMap(\.frame).reduce(0) { $0 + $1.wireSize } == bytes.readableBytes)
        if vector.json["expectError"]?["code"]?.uint64Value == UInt64(ErrorCode.duplicateRequestId.rawValue) {
            let duplicate = events.compactMap(\.frame).first {
                if case .duplicateRequestID = $0.pairing { return true }
                return false
            }
            let id = vector.json["expectError"]?["requestId"]?.uint64Value
            #expect(duplicate?.requestID.map(UInt64.init) == id)
        }
    }
}
