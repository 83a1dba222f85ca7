import NIOCore

/// Unsigned LEB128 varints and zigzag, as `Protocol/SPEC.md` §3.1 defines them.
///
/// Every varint on the wire is minimal: a continuation byte followed by a final 0x00 group is rejected, so each
/// value has exactly one encoding and re-encoding a decoded message reproduces its bytes.
public enum Varint {
    /// Number of bytes `value` takes as a varint (1...10).
    @inlinable
    public static func size(_ value: UInt64) -> Int {
        // 7 payload bits per byte; `| 1` makes 0 take one byte.
        let bits = 64 - (value | 1).leadingZeroBitCount
        return (bits + 6) / 7
    }

    /// Maps a signed value onto an unsigned one so that small magnitudes stay small (-1 -> 1, 1 -> 2).
    @inlinable
    public static func zigzag(_ value: Int64) -> UInt64 {
        UInt64(bitPattern: (value << 1) ^ (value >> 63))
    }

    /// Inverse of ``zigzag(_:)``.
    @inlinable
    public static func unzigzag(_ value: UInt64) -> Int64 {
        Int64(bitPattern: (value >> 1) ^ (0 &- (value & 1)))
    }
}

/// Outcome of peeking a varint at the front of a buffer that may not hold all of it yet.
@usableFromInline
enum VarintPeek: Equatable {
    case value(UInt64, length: Int)
    case needMoreBytes
    case invalid
}

extension ByteBuffer {
    /// Appends `value` as a minimal unsigned LEB128 varint.
    @inlinable
    @discardableResult
    public mutating func writeSwitchboardVarint(_ value: UInt64) -> Int {
        if value < 0x80 {
            return self.writeInteger(UInt8(truncatingIfNeeded: value))
        }
        var v = value
        var written = 0
        while v >= 0x80 {
            written += self.writeInteger(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        written += self.writeInteger(UInt8(truncatingIfNeeded: v))
        return written
    }

    /// Looks at a varint starting `offset` bytes after the reader index without moving it.
    ///
    /// - Parameter maxBytes: the most bytes the varint may take (4 for a frame length, 5 for a request id, 10 for a
    ///   64-bit field). A longer one, a non-minimal one, or one whose value overflows 64 bits is `.invalid`.
    @usableFromInline
    func peekSwitchboardVarint(at offset: Int = 0, maxBytes: Int) -> VarintPeek {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        var index = self.readerIndex + offset
        let end = self.writerIndex
        var count = 0
        while true {
            guard index < end else { return count >= maxBytes ? .invalid : .needMoreBytes }
            guard count < maxBytes else { return .invalid }
            guard let byte = self.getInteger(at: index, as: UInt8.self) else { return .needMoreBytes }
            count += 1
            index += 1
            if count == 10 && byte > 1 { return .invalid }  // bits past 2^64
            result |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 {
                if byte == 0 && count > 1 { return .invalid }  // overlong: trailing zero group
                return .value(result, length: count)
            }
            shift += 7
        }
    }
}
