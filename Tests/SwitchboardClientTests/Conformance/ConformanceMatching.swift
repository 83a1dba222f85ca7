import SwitchboardClient

/// Protocol/conformance/README.md's matching rules: `expect` matches `actual` when an object's every member is in
/// `actual` and matches (members it does not name are ignored), an array has the same length and matches element by
/// element, the string `"$any"` stands for anything present, and anything else is equal (a boolean never equals a
/// number: `JSONValue` keeps them apart).
enum ConformanceMatching {
    /// A mismatch, with the path where it was found.
    struct Mismatch: Error, CustomStringConvertible {
        var description: String
    }

    /// Throws ``Mismatch`` unless `actual` matches `expected`.
    static func match(_ expected: JSONValue, _ actual: JSONValue, at path: String = "$") throws(Mismatch) {
        if expected == .string("$any") { return }
        switch expected {
        case .object(let members):
            guard case .object = actual else { throw Mismatch(description: "\(path): expected an object, got \(actual)") }
            for member in members {
                guard let value = actual[member.key] else {
                    throw Mismatch(description: "\(path): no \(member.key) in \(actual)")
                }
                try Self.match(member.value, value, at: "\(path).\(member.key)")
            }
        case .array(let elements):
            guard case .array(let others) = actual, others.count == elements.count else {
                throw Mismatch(description: "\(path): expected \(elements.count) elements, got \(actual)")
            }
            for (index, element) in elements.enumerated() {
                try Self.match(element, others[index], at: "\(path)[\(index)]")
            }
        default:
            guard expected == actual else { throw Mismatch(description: "\(path): expected \(expected), got \(actual)") }
        }
    }

    /// A step's value with `"$name"` replaced by what a `save` stored under `name` and `{"$repeat": text,
    /// "times": n}` by `text` repeated `n` times.
    static func resolve(_ value: JSONValue, saved: [String: JSONValue]) throws(Mismatch) -> JSONValue {
        switch value {
        case .string(let text) where text.hasPrefix("$") && saved[String(text.dropFirst())] != nil:
            return saved[String(text.dropFirst())]!
        case .object(let members):
            if let text = value["$repeat"] {
                guard let piece = text.stringValue, let times = value["times"]?.uint64Value else {
                    throw Mismatch(description: "a bad $repeat: \(value)")
                }
                return .string(String(repeating: piece, count: Int(times)))
            }
            var resolved: [(key: String, value: JSONValue)] = []
            for member in members { resolved.append((member.key, try Self.resolve(member.value, saved: saved))) }
            return .object(resolved)
        case .array(let elements):
            var resolved: [JSONValue] = []
            for element in elements { resolved.append(try Self.resolve(element, saved: saved)) }
            return .array(resolved)
        default:
            return value
        }
    }
}
