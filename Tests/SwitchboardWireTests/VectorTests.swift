import Foundation
import NIOCore
import SwitchboardWire
import Testing

/// Runs every vector of `Protocol/vectors` both ways against the Swift codec, so the spec and the code cannot drift.
@Suite struct VectorTests {
    struct Vector: CustomTestStringConvertible, Sendable {
        var file: String
        var json: JSONValue
        var name: String { self.json["name"]?.stringValue ?? "?" }
        var testDescription: String { "\(self.file): \(self.name)" }
    }

    static let vectorDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Protocol/vectors")

    static func load(_ file: String) -> [Vector] {
        let url = vectorDirectory.appendingPathComponent(file)
        guard let data = try? Data(contentsOf: url), let text = String(data: data, encoding: .utf8),
            let root = try? JSONValue.parse(text), let vectors = root["vectors"]?.arrayValue
        else { return [] }
        return vectors.map { Vector(file: file, json: $0) }
    }

    static let all: [Vector] = ["frames.json", "compressed.json", "streams.json", "malformed.json", "unknown.json"]
        .flatMap(load)

    static func limits(_ vector: JSONValue) -> FrameLimits {
        guard let limits = vector["limits"] else { return .default }
        return FrameLimits(
            maxFrameSize: Int(limits["maxFrameSize"]?.uint64Value ?? 1 << 20),
            maxInflatedSize: Int(limits["maxInflatedSize"]?.uint64Value ?? 1 << 20),
            compressionEnabled: limits["compression"]?.boolValue ?? true)
    }

    static func direction(_ vector: JSONValue) -> FrameDirection {
        vector["direction"]?.stringValue == "c2s" ? .clientToServer : .serverToClient
    }

    @Test func everyVectorFileIsPresent() {
        #expect(Self.all.count > 300, "found \(Self.all.count) vectors in \(Self.vectorDirectory.path)")
        for file in ["frames.json", "compressed.json", "streams.json", "malformed.json", "unknown.json"] {
            #expect(!Self.load(file).isEmpty, "\(file) is missing or empty")
        }
    }

    @Test(arguments: all)
    func vectorHoldsInBothDirections(vector: Vector) throws {
        let json = vector.json
        if json["layer"]?.stringValue == "session" { return }  // server behaviour: SwitchboardServerTests
        let bytes = Codec.bytes(hex: json["hex"]?.stringValue ?? "")
        var decoder = FrameDecoder(limits: Self.limits(json), direction: Self.direction(json))
        let compressed = json["compressed"]?.boolValue ?? false
        let canonical = json["canonical"]?.boolValue ?? true

        if let expected = json["expectError"] {
            var buffer = bytes
            var caught: SwitchboardWireError?
            do {
                while let frame = try decoder.decodeFrame(from: &buffer) {
                    _ = try SwitchboardMessage.decode(frame)
                }
                _ = try decoder.decodeLast(buffer: &buffer, seenEOF: true)
            } catch let error as SwitchboardWireError {
                caught = error
            }
            let error = try #require(caught, "no error, expected \(expected)")
            #expect(UInt64(error.code.rawValue) == expected["code"]?.uint64Value, "\(error)")
            if let id = expected["requestId"]?.uint64Value {
                #expect(error.requestID.map(UInt64.init) == id && error.keepsConnectionOpen, "\(error)")
            } else {
                #expect(!error.keepsConnectionOpen, "\(error) should close the connection")
            }
            #expect(expected["fatal"]?.boolValue == !error.keepsConnectionOpen, "\(error)")
            return
        }

        let expectedMessages: [SwitchboardMessage]
        if let messages = json["messages"]?.arrayValue {
            expectedMessages = try messages.map { try SwitchboardMessage(json: $0) }
        } else {
            expectedMessages = [try SwitchboardMessage(json: try #require(json["message"]))]
        }
        // Decode: all at once, then one byte at a time.
        var buffer = bytes
        var decoded: [SwitchboardMessage] = []
        while let frame = try decoder.decodeFrame(from: &buffer) {
            decoded.append(try SwitchboardMessage.decode(frame))
        }
        #expect(buffer.readableBytes == 0)
        #expect(decoded == expectedMessages)
        var byteDecoder = FrameDecoder(limits: Self.limits(json), direction: Self.direction(json))
        var trickle = ByteBuffer()
        var trickled: [SwitchboardMessage] = []
        for byte in bytes.readableBytesView {
            trickle.writeInteger(byte)
            while let frame = try byteDecoder.decodeFrame(from: &trickle) {
                trickled.append(try SwitchboardMessage.decode(frame))
            }
        }
        #expect(trickled == expectedMessages)
        // The JSON rendering of what was decoded equals the vector's.
        if let message = json["message"], let first = decoded.first {
            #expect(first.jsonValue == message, "rendered \(first.jsonValue)")
        }
        // Encode.
        var encoded = ByteBuffer()
        for message in expectedMessages {
            FrameEncoder(compressionThreshold: compressed ? 1 : nil).encode(message, into: &encoded)
        }
        if compressed {
            #expect(try Codec.decodeAll(encoded) == expectedMessages)
        } else if canonical {
            #expect(Codec.hex(encoded) == json["hex"]?.stringValue)
        } else if let canonicalHex = json["canonicalHex"]?.stringValue {
            #expect(Codec.hex(encoded) == canonicalHex)
        }
    }
}
