import NIOCore
import SwitchboardWire

/// Reads frame header fields at any index of a buffer without consuming anything, for the plausibility check.
enum HeaderPeek {
    /// A varint read at an index.
    enum VarintResult: Equatable {
        case value(UInt64, size: Int)
        case needMoreBytes
        case invalid
    }

    /// Reads a minimal unsigned varint of at most `maxBytes` bytes at `index` (`Protocol/SPEC.md` §3.1).
    static func varint(in buffer: ByteBuffer, at index: Int, maxBytes: Int) -> VarintResult {
        var value: UInt64 = 0
        var count = 0
        while true {
            guard index + count < buffer.writerIndex else {
                return count >= maxBytes ? .invalid : .needMoreBytes
            }
            guard count < maxBytes, let byte = buffer.getInteger(at: index + count, as: UInt8.self) else {
                return .invalid
            }
            count += 1
            if count == 10 && byte > 1 { return .invalid }
            value |= UInt64(byte & 0x7F) << (7 * (count - 1))
            if byte < 0x80 {
                if byte == 0 && count > 1 { return .invalid }
                return .value(value, size: count)
            }
        }
    }

    /// What the bytes at an index say about a frame starting there.
    enum HeaderVerdict: Equatable {
        /// Length, flags and type are all present and sound.
        case sound
        /// Something present contradicts a frame.
        case unsound
        /// The bytes end before the type byte, and nothing in them contradicts a frame.
        case incomplete
    }

    /// Whether the bytes at `index` can begin a frame: a minimal length of 2 up to the limit, no reserved flag bits,
    /// a class `direction` allows, and ERROR only on a response.
    static func header(
        in buffer: ByteBuffer, at index: Int, limits: FrameLimits, direction: FrameDirection
    ) -> HeaderVerdict {
        let lengthSize: Int
        switch Self.varint(in: buffer, at: index, maxBytes: 4) {
        case .needMoreBytes: return .incomplete
        case .invalid: return .unsound
        case .value(let length, let size):
            guard length >= 2, length <= UInt64(limits.maxFrameSize) else { return .unsound }
            lengthSize = size
        }
        guard let flags = buffer.getInteger(at: index + lengthSize, as: UInt8.self).map(FrameFlags.init(rawValue:))
        else { return .incomplete }
        guard FrameFlags.known.isSuperset(of: flags) else { return .unsound }
        guard let type = buffer.getInteger(at: index + lengthSize + 1, as: UInt8.self) else { return .incomplete }
        let kind = FrameKind(rawValue: type >> 6) ?? .control
        if flags.contains(.error) && kind != .response { return .unsound }
        return direction.permits(kind) ? .sound : .unsound
    }
}

extension FrameDirection {
    /// Whether frames of `kind` may travel in this direction (`Protocol/SPEC.md` §2.3).
    func permits(_ kind: FrameKind) -> Bool {
        switch self {
        case .any: return true
        case .clientToServer: return kind == .control || kind == .request
        case .serverToClient: return kind != .request
        }
    }
}
