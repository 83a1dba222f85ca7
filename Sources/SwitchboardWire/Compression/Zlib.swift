import CSwitchboardZlib
import NIOCore

/// Per-frame zlib (RFC 1950) compression as `Protocol/SPEC.md` §4 specifies: each frame's body is one independent
/// zlib stream, inflated into a buffer of exactly the declared size and never beyond it.
public enum Zlib {
    /// Compresses `input` into one complete zlib stream appended to `output`.
    ///
    /// - Returns: the number of bytes written, or nil if zlib failed (it only fails on allocation).
    @discardableResult
    public static func deflate(_ input: ByteBuffer, into output: inout ByteBuffer, level: Int32 = 6) -> Int? {
        var stream = z_stream()
        // A window no larger than the input compresses it as well as the full 32 KiB one, and zlib's state shrinks
        // with it: about 64 KiB for a 4 KiB body instead of 256 KiB, which malloc would map and unmap each time.
        let (windowBits, memoryLevel) = Self.windowAndMemoryLevel(forBytes: input.readableBytes)
        guard CSwitchboardZlib_deflateInit2(&stream, level, windowBits, memoryLevel) == Z_OK else { return nil }
        defer { deflateEnd(&stream) }
        let bound = Int(deflateBound(&stream, UInt(input.readableBytes)))
        return input.withUnsafeReadableBytes { inputBytes -> Int? in
            output.writeWithUnsafeMutableBytes(minimumWritableBytes: bound) { outputBytes in
                stream.next_in = UnsafeMutablePointer(
                    mutating: inputBytes.baseAddress?.assumingMemoryBound(to: Bytef.self))
                stream.avail_in = uInt(inputBytes.count)
                stream.next_out = outputBytes.baseAddress?.assumingMemoryBound(to: Bytef.self)
                stream.avail_out = uInt(outputBytes.count)
                guard CSwitchboardZlib.deflate(&stream, Z_FINISH) == Z_STREAM_END else { return 0 }
                return Int(stream.total_out)
            }
        }.flatMap { $0 > 0 ? $0 : nil }
    }

    /// The smallest window (9-15 bits) that covers `count` bytes, and a hash memory level to match (at most 8).
    static func windowAndMemoryLevel(forBytes count: Int) -> (windowBits: Int32, memoryLevel: Int32) {
        var bits: Int32 = 9
        while bits < 15 && (1 << bits) < count { bits += 1 }
        return (bits, min(8, bits - 6))
    }

    /// Inflates one zlib stream that must produce exactly `expectedSize` bytes.
    ///
    /// Output is written into a buffer of `expectedSize` bytes and zlib is never given room for more, so a
    /// decompression bomb costs at most `expectedSize` bytes, which the caller bounded before calling.
    /// - Throws: ``ErrorCode/badCompression`` for a damaged stream, a bad Adler-32, a preset dictionary, output longer
    ///   or shorter than `expectedSize`, or bytes after the end of the stream.
    public static func inflate(
        _ input: ByteBuffer,
        expectedSize: Int,
        allocator: ByteBufferAllocator = ByteBufferAllocator()
    ) throws(SwitchboardWireError) -> ByteBuffer {
        var stream = z_stream()
        guard CSwitchboardZlib_inflateInit(&stream) == Z_OK else {
            throw SwitchboardWireError(.internal, "zlib inflateInit failed")
        }
        defer { inflateEnd(&stream) }
        var output = allocator.buffer(capacity: expectedSize)
        // Room for exactly expectedSize bytes plus one probe byte: if zlib fills the probe byte, the stream is
        // longer than declared.
        let status: (code: Int32, produced: Int, leftover: Int) = input.withUnsafeReadableBytes { inputBytes in
            var result: (Int32, Int, Int) = (Z_DATA_ERROR, 0, 0)
            output.writeWithUnsafeMutableBytes(minimumWritableBytes: expectedSize + 1) { outputBytes in
                stream.next_in = UnsafeMutablePointer(
                    mutating: inputBytes.baseAddress?.assumingMemoryBound(to: Bytef.self))
                stream.avail_in = uInt(inputBytes.count)
                stream.next_out = outputBytes.baseAddress?.assumingMemoryBound(to: Bytef.self)
                stream.avail_out = uInt(expectedSize + 1)
                let code = CSwitchboardZlib.inflate(&stream, Z_FINISH)
                result = (code, Int(stream.total_out), Int(stream.avail_in))
                return min(Int(stream.total_out), expectedSize)
            }
            return result
        }
        switch status.code {
        case Z_STREAM_END:
            guard status.produced == expectedSize else {
                throw SwitchboardWireError(
                    .badCompression, "stream inflates to \(status.produced) bytes, header declared \(expectedSize)")
            }
            guard status.leftover == 0 else {
                throw SwitchboardWireError(.badCompression, "\(status.leftover) bytes after the end of the zlib stream")
            }
            return output
        case Z_NEED_DICT:
            throw SwitchboardWireError(.badCompression, "zlib stream asks for a preset dictionary")
        case Z_BUF_ERROR, Z_OK:
            if status.produced > expectedSize {
                throw SwitchboardWireError(
                    .badCompression, "stream inflates past the declared \(expectedSize) bytes")
            }
            throw SwitchboardWireError(.badCompression, "zlib stream is truncated")
        default:
            throw SwitchboardWireError(.badCompression, "zlib stream is damaged (zlib status \(status.code))")
        }
    }
}
