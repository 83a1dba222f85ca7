import NIOCore
import SwitchboardWire

/// A channel broadcast as the text of a PostgreSQL `NOTIFY` payload: the relaying node's id, a space, `k` (keep it
/// for rewind) or `n` (`noRewind`), then the broadcast's wire body (`ChannelBroadcast`) in base64 (a payload is text of at most 8,000 bytes; a broadcast of
/// 4,096 data bytes with its channel and sender is well under it in base64).
enum NotifyPayload {
    /// The longest payload PostgreSQL accepts, in bytes.
    static let maxBytes = 7_999

    static func encode(_ broadcast: ChannelBroadcast, keep: Bool, node: String) -> String {
        var body = ByteBuffer()
        broadcast.encode(into: &body)
        return node + " " + (keep ? "k" : "n") + Base64Text.encode(body.readableBytesView)
    }

    /// The node, the broadcast and whether to keep it; nil for a payload that is not one.
    static func decode(_ payload: String) -> (node: String, broadcast: ChannelBroadcast, keep: Bool)? {
        guard let space = payload.firstIndex(of: " ") else { return nil }
        var rest = payload[payload.index(after: space)...]
        guard let flag = rest.popFirst(), flag == "k" || flag == "n" else { return nil }
        guard let bytes = Base64Text.decode(rest) else { return nil }
        guard let broadcast = try? ChannelBroadcast(decoding: ByteBuffer(bytes: bytes)) else { return nil }
        return (String(payload[..<space]), broadcast, flag == "k")
    }
}

/// Standard base64 (RFC 4648, with padding), for the notification payloads.
enum Base64Text {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()

    static func encode(_ bytes: some Collection<UInt8>) -> String {
        let input = Array(bytes)
        var output: [UInt8] = []
        output.reserveCapacity((input.count + 2) / 3 * 4)
        var index = 0
        while index < input.count {
            let count = min(3, input.count - index)
            let b0 = input[index]
            let b1 = count > 1 ? input[index + 1] : 0
            let b2 = count > 2 ? input[index + 2] : 0
            output.append(alphabet[Int(b0 >> 2)])
            output.append(alphabet[Int((b0 & 0x03) << 4 | b1 >> 4)])
            output.append(count > 1 ? alphabet[Int((b1 & 0x0F) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            output.append(count > 2 ? alphabet[Int(b2 & 0x3F)] : UInt8(ascii: "="))
            index += 3
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// The bytes; nil for text that is not padded base64.
    static func decode(_ text: Substring) -> [UInt8]? {
        let input = Array(text.utf8)
        guard input.count % 4 == 0 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(input.count / 4 * 3)
        var index = 0
        while index < input.count {
            var quad: [UInt8] = []
            var padding = 0
            for offset in 0..<4 {
                let byte = input[index + offset]
                if byte == UInt8(ascii: "=") {
                    guard index + 4 == input.count, offset >= 2 else { return nil }
                    padding += 1
                    quad.append(0)
                } else {
                    guard padding == 0 else { return nil }
                    let value = values[Int(byte)]
                    guard value != 0xFF else { return nil }
                    quad.append(value)
                }
            }
            output.append(quad[0] << 2 | quad[1] >> 4)
            if padding < 2 { output.append(quad[1] << 4 | quad[2] >> 2) }
            if padding < 1 { output.append(quad[2] << 6 | quad[3]) }
            index += 4
        }
        return output
    }
}
