/// A JSON value, used for the protocol's canonical JSON rendering (`Protocol/SPEC.md` §10).
///
/// Numbers keep their source text so 64-bit integers survive exactly. Objects keep their key order for printing;
/// equality ignores it.
public enum JSONValue: Sendable, CustomStringConvertible {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])

    /// A number from an unsigned integer.
    public static func uint(_ value: UInt64) -> JSONValue { .number(String(value)) }
    /// A number from a signed integer.
    public static func int(_ value: Int64) -> JSONValue { .number(String(value)) }

    /// The member named `key` of an object.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.last(where: { $0.key == key })?.value
    }

    /// The value as an unsigned integer, if it is a number that is one.
    public var uint64Value: UInt64? {
        guard case .number(let text) = self else { return nil }
        return UInt64(text)
    }

    /// The value as a signed integer, if it is a number that is one.
    public var int64Value: Int64? {
        guard case .number(let text) = self else { return nil }
        return Int64(text)
    }

    /// The value as a string, if it is one.
    public var stringValue: String? {
        guard case .string(let text) = self else { return nil }
        return text
    }

    /// The value as a bool, if it is one.
    public var boolValue: Bool? {
        guard case .bool(let value) = self else { return nil }
        return value
    }

    /// The elements, if the value is an array.
    public var arrayValue: [JSONValue]? {
        guard case .array(let elements) = self else { return nil }
        return elements
    }

    /// Compact JSON text, keys in their stored order.
    public var description: String {
        var out = ""
        self.write(to: &out)
        return out
    }

    /// Appends compact JSON text to `out`.
    public func write(to out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let value): out += value ? "true" : "false"
        case .number(let text): out += text
        case .string(let text): Self.writeString(text, to: &out)
        case .array(let elements):
            out += "["
            for (index, element) in elements.enumerated() {
                if index > 0 { out += "," }
                element.write(to: &out)
            }
            out += "]"
        case .object(let members):
            out += "{"
            for (index, member) in members.enumerated() {
                if index > 0 { out += "," }
                Self.writeString(member.key, to: &out)
                out += ":"
                member.value.write(to: &out)
            }
            out += "}"
        }
    }

    /// Appends `text` as a JSON string: quotes, backslashes and control characters escaped (RFC 8259 §7).
    public static func writeString(_ text: String, to out: inout String) {
        out += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }
}

extension JSONValue: Equatable {
    /// Structural equality; object members compare by key, in any order. Numbers compare by their integer value when
    /// both are integers, by text otherwise.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.number(let a), .number(let b)):
            if let x = Int64(a), let y = Int64(b) { return x == y }
            if let x = UInt64(a), let y = UInt64(b) { return x == y }
            return a == b
        case (.string(let a), .string(let b)): return a == b
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)):
            guard a.count == b.count else { return false }
            for member in a {
                guard let other = b.first(where: { $0.key == member.key }), other.value == member.value else {
                    return false
                }
            }
            return true
        default: return false
        }
    }
}

/// Errors of ``JSONValue/parse(_:)``.
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong.
    public var message: String
    /// UTF-8 offset where it was found.
    public var offset: Int
    public var description: String { "JSON parse error at \(self.offset): \(self.message)" }
}

extension JSONValue {
    /// Parses JSON text (RFC 8259). Nesting deeper than 64 levels is refused.
    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        var parser = JSONTextParser(bytes: Array(text.utf8))
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == parser.bytes.count else { throw parser.error("trailing characters") }
        return value
    }
}

struct JSONTextParser {
    let bytes: [UInt8]
    var index = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    func error(_ message: String) -> JSONParseError { JSONParseError(message: message, offset: self.index) }

    mutating func skipWhitespace() {
        while self.index < self.bytes.count, [0x20, 0x0A, 0x0D, 0x09].contains(self.bytes[self.index]) {
            self.index += 1
        }
    }

    mutating func expect(_ literal: String) throws(JSONParseError) {
        for byte in literal.utf8 {
            guard self.index < self.bytes.count, self.bytes[self.index] == byte else {
                throw self.error("expected \(literal)")
            }
            self.index += 1
        }
    }

    mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth < 64 else { throw self.error("nesting too deep") }
        guard self.index < self.bytes.count else { throw self.error("unexpected end") }
        switch self.bytes[self.index] {
        case UInt8(ascii: "n"): try self.expect("null"); return .null
        case UInt8(ascii: "t"): try self.expect("true"); return .bool(true)
        case UInt8(ascii: "f"): try self.expect("false"); return .bool(false)
        case UInt8(ascii: "\""): return .string(try self.parseString())
        case UInt8(ascii: "["):
            self.index += 1
            var elements: [JSONValue] = []
            self.skipWhitespace()
            if self.index < self.bytes.count, self.bytes[self.index] == UInt8(ascii: "]") {
                self.index += 1
                return .array(elements)
            }
            while true {
                self.skipWhitespace()
                elements.append(try self.parseValue(depth: depth + 1))
                self.skipWhitespace()
                guard self.index < self.bytes.count else { throw self.error("unterminated array") }
                let byte = self.bytes[self.index]
                self.index += 1
                if byte == UInt8(ascii: "]") { return .array(elements) }
                guard byte == UInt8(ascii: ",") else { throw self.error("expected , or ]") }
            }
        case UInt8(ascii: "{"):
            self.index += 1
            var members: [(key: String, value: JSONValue)] = []
            self.skipWhitespace()
            if self.index < self.bytes.count, self.bytes[self.index] == UInt8(ascii: "}") {
                self.index += 1
                return .object(members)
            }
            while true {
                self.skipWhitespace()
                guard self.index < self.bytes.count, self.bytes[self.index] == UInt8(ascii: "\"") else {
                    throw self.error("expected a key")
                }
                let key = try self.parseString()
                self.skipWhitespace()
                try self.expect(":")
                self.skipWhitespace()
                members.append((key, try self.parseValue(depth: depth + 1)))
                self.skipWhitespace()
                guard self.index < self.bytes.count else { throw self.error("unterminated object") }
                let byte = self.bytes[self.index]
                self.index += 1
                if byte == UInt8(ascii: "}") { return .object(members) }
                guard byte == UInt8(ascii: ",") else { throw self.error("expected , or }") }
            }
        default:
            return try self.parseNumber()
        }
    }

    mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = self.index
        while self.index < self.bytes.count {
            let byte = self.bytes[self.index]
            let isNumberByte =
                (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-")
                || byte == UInt8(ascii: "+") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e")
                || byte == UInt8(ascii: "E")
            guard isNumberByte else { break }
            self.index += 1
        }
        guard self.index > start else { throw self.error("unexpected character") }
        return .number(String(decoding: self.bytes[start..<self.index], as: UTF8.self))
    }

    mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard self.index + 4 <= self.bytes.count else { throw self.error("short \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = self.bytes[self.index]
            self.index += 1
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw self.error("bad hex digit")
            }
            value = value << 4 | digit
        }
        return value
    }

    mutating func parseString() throws(JSONParseError) -> String {
        self.index += 1  // opening quote
        var scalars = String.UnicodeScalarView()
        var run: [UInt8] = []
        func flush(_ run: inout [UInt8], into scalars: inout String.UnicodeScalarView) {
            if !run.isEmpty {
                scalars.append(contentsOf: String(decoding: run, as: UTF8.self).unicodeScalars)
                run.removeAll(keepingCapacity: true)
            }
        }
        while true {
            guard self.index < self.bytes.count else { throw self.error("unterminated string") }
            let byte = self.bytes[self.index]
            self.index += 1
            if byte == UInt8(ascii: "\"") {
                flush(&run, into: &scalars)
                return String(scalars)
            }
            guard byte == UInt8(ascii: "\\") else {
                run.append(byte)
                continue
            }
            flush(&run, into: &scalars)
            guard self.index < self.bytes.count else { throw self.error("unterminated escape") }
            let escape = self.bytes[self.index]
            self.index += 1
            switch escape {
            case UInt8(ascii: "\""): scalars.append("\"")
            case UInt8(ascii: "\\"): scalars.append("\\")
            case UInt8(ascii: "/"): scalars.append("/")
            case UInt8(ascii: "b"): scalars.append("\u{08}")
            case UInt8(ascii: "f"): scalars.append("\u{0C}")
            case UInt8(ascii: "n"): scalars.append("\n")
            case UInt8(ascii: "r"): scalars.append("\r")
            case UInt8(ascii: "t"): scalars.append("\t")
            case UInt8(ascii: "u"):
                var code = try self.parseHex4()
                if (0xD800..<0xDC00).contains(code) {
                    try self.expect("\\u")
                    let low = try self.parseHex4()
                    guard (0xDC00..<0xE000).contains(low) else { throw self.error("bad surrogate pair") }
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let scalar = Unicode.Scalar(code) else { throw self.error("bad \\u escape") }
                scalars.append(scalar)
            default:
                throw self.error("bad escape")
            }
        }
    }
}
