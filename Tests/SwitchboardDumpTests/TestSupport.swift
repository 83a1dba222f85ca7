import Foundation
import NIOCore
import SwitchboardDump
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// A test vector of `Protocol/vectors`, with the receiver settings it asks for.
struct Vector: CustomTestStringConvertible, Sendable {
    var file: String
    var json: JSONValue

    var name: String { self.json["name"]?.stringValue ?? "?" }
    var testDescription: String { "\(self.file): \(self.name)" }
    var hex: String { self.json["hex"]?.stringValue ?? "" }
    var isSessionLayer: Bool { self.json["layer"]?.stringValue == "session" }

    var limits: FrameLimits {
        guard let limits = self.json["limits"] else { return .default }
        return FrameLimits(
            maxFrameSize: Int(limits["maxFrameSize"]?.uint64Value ?? 1 << 20),
            maxInflatedSize: Int(limits["maxInflatedSize"]?.uint64Value ?? 1 << 20),
            compressionEnabled: limits["compression"]?.boolValue ?? true)
    }

    var direction: FrameDirection {
        self.json["direction"]?.stringValue == "c2s" ? .clientToServer : .serverToClient
    }

    /// The expected messages of a valid frame or stream vector, in their JSON rendering.
    var expectedMessages: [JSONValue]? {
        if let messages = self.json["messages"]?.arrayValue { return messages }
        if let message = self.json["message"] { return [message] }
        return nil
    }

    static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Protocol/vectors")

    static let files = ["frames.json", "compressed.json", "streams.json", "malformed.json", "unknown.json"]

    static func load(_ file: String) -> [Vector] {
        let url = Self.directory.appendingPathComponent(file)
        guard let data = try? Data(contentsOf: url), let text = String(data: data, encoding: .utf8),
            let root = try? JSONValue.parse(text), let vectors = root["vectors"]?.arrayValue
        else { return [] }
        return vectors.map { Vector(file: file, json: $0) }
    }

    static let all: [Vector] = Self.files.flatMap(Self.load)
    static let frameLayer: [Vector] = Self.all.filter { !$0.isSessionLayer }
    static let sessionLayer: [Vector] = Self.all.filter(\.isSessionLayer)
}

/// Byte helpers for the tests.
enum Bytes {
    static func fromHex(_ hex: String) -> ByteBuffer {
        (try? HexTextDecoder.bytes(fromHex: hex)) ?? ByteBuffer()
    }

    static func encode(_ messages: [SwitchboardMessage], compressionThreshold: Int? = nil) -> ByteBuffer {
        var buffer = ByteBuffer()
        let encoder = FrameEncoder(compressionThreshold: compressionThreshold)
        for message in messages { encoder.encode(message, into: &buffer) }
        return buffer
    }

    /// Writes `buffer` as hex the way a person would paste it: 16 bytes a line, each line after a `#` comment
    /// naming its offset, digits in pairs separated by spaces, upper case on odd lines.
    static func commentedHex(_ buffer: ByteBuffer) -> String {
        var text = "# dump of \(buffer.readableBytes) bytes\n"
        let bytes = Array(buffer.readableBytesView)
        for (line, start) in stride(from: 0, to: bytes.count, by: 16).enumerated() {
            let digits = bytes[start..<min(start + 16, bytes.count)].map { byte in
                let pair = String(byte, radix: 16)
                return byte < 16 ? "0" + pair : pair
            }.joined(separator: " ")
            text += "# offset \(start)\n" + (line % 2 == 1 ? digits.uppercased() : digits) + "  # line \(line)\n"
        }
        return text
    }
}


extension DumpEvent {
    /// The first error the event reports: a stream problem, or a frame whose body did not decode.
    var reportedError: SwitchboardWireError? {
        if let problem = self.problem { return problem.error }
        if let frame = self.frame, case .failure(let error) = frame.content { return error }
        return nil
    }
}
