import NIOCore
import SwitchboardFuzzing
import SwitchboardTestSupport
import SwitchboardWire

/// Random whole messages of every class, for the fuzz tests.
extension SwitchboardMessage {
    static func random(using generator: inout RandomValueGenerator) -> SwitchboardMessage {
        let id = UInt32.random(in: 1...UInt32.max, using: &generator.rng)
        switch generator.index(below: 5) {
        case 0: return .control(.random(using: &generator))
        case 1: return .request(id: id, .random(using: &generator))
        case 2: return .response(id: id, .random(using: &generator))
        case 3:
            let op = Opcode.allCases[generator.index(below: Opcode.allCases.count)].rawValue
            return .error(id: id, op: op, .random(using: &generator))
        default: return .push(.random(using: &generator))
        }
    }
}

/// Helpers shared by the codec tests.
enum Codec {
    static func encode(_ message: SwitchboardMessage, threshold: Int? = nil) -> ByteBuffer {
        var buffer = ByteBuffer()
        FrameEncoder(compressionThreshold: threshold).encode(message, into: &buffer)
        return buffer
    }

    /// Decodes every frame in `bytes`; throws on the first error, fails if bytes are left over.
    static func decodeAll(_ bytes: ByteBuffer, limits: FrameLimits = .default) throws -> [SwitchboardMessage] {
        var decoder = FrameDecoder(limits: limits)
        var buffer = bytes
        var messages: [SwitchboardMessage] = []
        while let frame = try decoder.decodeFrame(from: &buffer) {
            messages.append(try SwitchboardMessage.decode(frame))
        }
        if buffer.readableBytes > 0 {
            throw SwitchboardWireError(.truncatedFrame, "\(buffer.readableBytes) bytes left")
        }
        return messages
    }

    static func hex(_ buffer: ByteBuffer) -> String {
        Hex.string(buffer.readableBytesView)
    }

    static func bytes(hex: String) -> ByteBuffer {
        ByteBuffer(bytes: Hex.bytes(hex) ?? [])
    }
}
