import NIOCore

/// The WebSocket side of sbbench's raw-socket subscribers (`--transport websocket`): the upgrade request, the
/// client's frames, and the server's frames taken apart, on blocking sockets during the set-up and inside the
/// ``FanoutReader`` during the measurement.
///
/// The client's frames carry the all-zero masking key (RFC 6455 §5.3 asks for an unpredictable one, which guards
/// browsers' users against proxies that misread the stream; the gateway unmasks whatever the key): the payload is
/// then sent as it is, and the benchmark spends nothing on masking.
enum WebSocketFraming {
    /// The HTTP request that upgrades a connection to `host` at `path`, offering `switchboard.v1`.
    static func upgradeRequest(host: String, path: String) -> ByteBuffer {
        ByteBuffer(
            string: "GET \(path) HTTP/1.1\r\nHost: \(host)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Key: c2JiZW5jaC1zdWJzY3JpYmVy\r\nSec-WebSocket-Version: 13\r\n"
                + "Sec-WebSocket-Protocol: switchboard.v1\r\n\r\n")
    }

    /// `payload` as one masked binary message (a client's frame).
    static func clientMessage<Bytes: Collection<UInt8>>(_ payload: Bytes) -> [UInt8] {
        var frame: [UInt8] = [0x82]
        let count = payload.count
        if count < 126 {
            frame.append(0x80 | UInt8(count))
        } else if count <= 0xFFFF {
            frame += [0x80 | 126, UInt8(count >> 8), UInt8(count & 0xFF)]
        } else {
            frame.append(0x80 | 127)
            for shift in stride(from: 56, through: 0, by: -8) { frame.append(UInt8((count >> shift) & 0xFF)) }
        }
        frame += [0, 0, 0, 0]  // the masking key: XOR with zero leaves the payload as it is
        frame += payload
        return frame
    }

    /// `payload` as one unmasked binary message (a server's frame: how bytes read before the reader took over are
    /// handed to it).
    static func serverMessage(_ payload: [UInt8]) -> [UInt8] {
        var frame = self.clientMessage(payload)
        frame[1] &= 0x7F
        let headerEnd = frame.count - payload.count
        frame.removeSubrange((headerEnd - 4)..<headerEnd)
        return frame
    }

    /// A server frame's header at `offset` of `bytes`: its opcode and fin bit, and where its payload lies; nil when
    /// the header is not all there yet.
    static func serverFrame(in bytes: UnsafeRawBufferPointer, at offset: Int) -> (opcode: UInt8, payload: Range<Int>)? {
        guard bytes.count - offset >= 2 else { return nil }
        let opcode = bytes[offset] & 0x0F
        var length = Int(bytes[offset + 1] & 0x7F)
        var start = offset + 2
        if length == 126 {
            guard bytes.count - offset >= 4 else { return nil }
            length = Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
            start += 2
        } else if length == 127 {
            guard bytes.count - offset >= 10 else { return nil }
            length = 0
            for index in 2..<10 { length = length << 8 | Int(bytes[offset + index]) }
            start += 8
        }
        guard bytes.count - start >= length else { return nil }
        return (opcode, start..<start + length)
    }

    /// Takes the complete server messages at the front of `raw` off it and appends their payloads to `payloads`;
    /// returns false at a close frame.
    static func unwrap(_ raw: inout ByteBuffer, into payloads: inout ByteBuffer) -> Bool {
        var consumed = 0
        var open = true
        raw.withUnsafeReadableBytes { bytes in
            while let frame = Self.serverFrame(in: bytes, at: consumed) {
                if frame.opcode == 0x8 { open = false }
                if frame.opcode == 0x2 || frame.opcode == 0x0 {
                    payloads.writeBytes(UnsafeRawBufferPointer(rebasing: bytes[frame.payload]))
                }
                consumed = frame.payload.upperBound
            }
        }
        raw.moveReaderIndex(forwardBy: consumed)
        return open
    }
}

/// A ``FanoutStreamScanner`` for subscribers on WebSocket: hands the payload of each binary message (whole frames,
/// `Protocol/SPEC.md` §2.5) to the scanner of the frames, and sends what that scanner answers (a PONG) as a client
/// message.
struct WebSocketFanoutScanner<Inner: FanoutStreamScanner>: FanoutStreamScanner {
    var inner: Inner

    mutating func scan(_ bytes: UnsafeRawBufferPointer, subscriber: Int, at now: UInt64, replies: inout [UInt8]) -> Int? {
        var offset = 0
        while let frame = WebSocketFraming.serverFrame(in: bytes, at: offset) {
            switch frame.opcode {
            case 0x2:
                let payload = UnsafeRawBufferPointer(rebasing: bytes[frame.payload])
                var answers: [UInt8] = []
                // A message holds whole frames: the scanner must take all of it.
                guard self.inner.scan(payload, subscriber: subscriber, at: now, replies: &answers) == payload.count
                else { return nil }
                if !answers.isEmpty { replies += WebSocketFraming.clientMessage(answers) }
            case 0x8:
                return nil  // the gateway closed the connection
            default:
                break  // pong
            }
            offset = frame.payload.upperBound
        }
        return offset
    }
}
