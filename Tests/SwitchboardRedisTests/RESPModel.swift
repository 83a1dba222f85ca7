import NIOCore
import SwitchboardRedis

/// A RESP value as a plain tree, written by hand here: what the tests expect a token to hold, and what the round trip
/// encodes, decodes and compares.
indirect enum RESPModel: Hashable, CustomStringConvertible {
    case simpleString(String)
    case simpleError(String)
    case number(Int64)
    case bulkString([UInt8])
    case bulkError([UInt8])
    /// The format (three bytes) and the text.
    case verbatimString([UInt8], [UInt8])
    case double(Double)
    case boolean(Bool)
    /// `_`, `$-1` or `*-1`: all read as null.
    case null
    case bigNumber(String)
    case array([RESPModel])
    case map([RESPModel])  // keys and values, alternating
    case set([RESPModel])
    case attribute([RESPModel])
    case push([RESPModel])

    /// The value's bytes on the wire.
    var encoded: [UInt8] {
        func line(_ type: String, _ text: String) -> [UInt8] { Array("\(type)\(text)\r\n".utf8) }
        func blob(_ type: String, _ bytes: [UInt8]) -> [UInt8] { line(type, String(bytes.count)) + bytes + [13, 10] }
        func aggregate(_ type: String, _ elements: [RESPModel], pairs: Bool = false) -> [UInt8] {
            line(type, String(pairs ? elements.count / 2 : elements.count)) + elements.flatMap(\.encoded)
        }
        switch self {
        case .simpleString(let text): return line("+", text)
        case .simpleError(let text): return line("-", text)
        case .number(let value): return line(":", String(value))
        case .bulkString(let bytes): return blob("$", bytes)
        case .bulkError(let bytes): return blob("!", bytes)
        case .verbatimString(let format, let text): return blob("=", format + [UInt8(ascii: ":")] + text)
        case .double(let value): return line(",", value.isNaN ? "nan" : value == .infinity ? "inf" : value == -.infinity ? "-inf" : "\(value)")
        case .boolean(let value): return line("#", value ? "t" : "f")
        case .null: return line("_", "")
        case .bigNumber(let digits): return line("(", digits)
        case .array(let elements): return aggregate("*", elements)
        case .map(let elements): return aggregate("%", elements, pairs: true)
        case .set(let elements): return aggregate("~", elements)
        case .attribute(let elements): return aggregate("|", elements, pairs: true)
        case .push(let elements): return aggregate(">", elements)
        }
    }

    /// What `token` holds, as a tree.
    init(_ token: RESPToken) {
        switch token.value {
        case .simpleString(let buffer): self = .simpleString(String(buffer: buffer))
        case .simpleError(let buffer): self = .simpleError(String(buffer: buffer))
        case .number(let value): self = .number(value)
        case .bulkString(let buffer): self = .bulkString(Array(buffer.readableBytesView))
        case .bulkError(let buffer): self = .bulkError(Array(buffer.readableBytesView))
        case .verbatimString(let buffer):
            let bytes = Array(buffer.readableBytesView)
            self = .verbatimString(Array(bytes[..<3]), Array(bytes[4...]))
        case .double(let value): self = .double(value)
        case .boolean(let value): self = .boolean(value)
        case .null: self = .null
        case .bigNumber(let buffer): self = .bigNumber(String(buffer: buffer))
        case .array(let elements): self = .array(elements.map(RESPModel.init))
        case .map(let pairs): self = .map(pairs.flatMap { [RESPModel($0.key), RESPModel($0.value)] })
        case .set(let elements): self = .set(elements.map(RESPModel.init))
        case .attribute(let pairs): self = .attribute(pairs.flatMap { [RESPModel($0.key), RESPModel($0.value)] })
        case .push(let elements): self = .push(elements.map(RESPModel.init))
        }
    }

    /// A random value (nested at most `depth` aggregates deep), with blobs that hold CR, LF and any byte.
    static func random(depth: Int, using generator: inout some RandomNumberGenerator) -> RESPModel {
        let kinds = depth > 0 ? 15 : 10
        func bytes() -> [UInt8] {
            let pool: [UInt8] = [0, 13, 10, 0x24, 0x2A, 0xFF, 0x80, 65, 66, 58]
            return (0..<Int.random(in: 0...12, using: &generator)).map { _ in
                Bool.random(using: &generator) ? pool.randomElement(using: &generator)! : UInt8.random(in: 0...255, using: &generator)
            }
        }
        func text() -> String {
            String((0..<Int.random(in: 0...10, using: &generator)).map { _ in "aZ09 :-_é".randomElement(using: &generator)! })
        }
        func elements(_ count: Int) -> [RESPModel] {
            (0..<count).map { _ in RESPModel.random(depth: depth - 1, using: &generator) }
        }
        switch Int.random(in: 0..<kinds, using: &generator) {
        case 0: return .simpleString(text())
        case 1: return .simpleError("ERR " + text())
        case 2: return .number(Int64.random(in: .min ... .max, using: &generator))
        case 3: return .bulkString(bytes())
        case 4: return .bulkError(bytes())
        case 5: return .verbatimString(Array((Bool.random(using: &generator) ? "txt" : "mkd").utf8), bytes())
        case 6: return .double([1.5, -0.25, 0, 1e300, .infinity, -.infinity].randomElement(using: &generator)!)
        case 7: return .boolean(Bool.random(using: &generator))
        case 8: return .null
        case 9: return .bigNumber((Bool.random(using: &generator) ? "-" : "") + String(UInt64.random(in: 0 ... .max, using: &generator)) + "123456789012345678901234567890")
        case 10: return .array(elements(Int.random(in: 0...4, using: &generator)))
        case 11: return .map(elements(2 * Int.random(in: 0...3, using: &generator)))
        case 12: return .set(elements(Int.random(in: 0...4, using: &generator)))
        case 13: return .attribute(elements(2 * Int.random(in: 0...2, using: &generator)))
        default: return .push(elements(Int.random(in: 0...4, using: &generator)))
        }
    }

    var description: String { String(decoding: self.encoded, as: UTF8.self).debugDescription }
}
