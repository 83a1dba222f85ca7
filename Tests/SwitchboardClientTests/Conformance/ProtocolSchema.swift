import SwitchboardClient

/// Protocol/schema.json, read at run time, for one job: completing a body's canonical JSON rendering with its absent
/// fields at their defaults (SPEC 3.5), as the conformance list's matching asks (`0`, `""`, `false`, `[]`, an enum's
/// default by name, a missing struct as null). The rendering leaves defaults out.
struct ProtocolSchema {
    let document: JSONValue

    init(text: String) throws {
        self.document = try JSONValue.parse(text)
    }

    /// A field list of the schema.
    enum Message {
        case request(String)
        case response(String)
        case push(String)
        case control(String)
        case structure(String)
    }

    /// The fields of `message`, as the schema lists them.
    func fields(of message: Message) throws -> [JSONValue] {
        switch message {
        case .request(let op): return try self.operationFields(op, "request")
        case .response(let op): return try self.operationFields(op, "response")
        case .push(let name): return try self.named(name, in: "pushes")["fields"]?.arrayValue ?? []
        case .control(let name): return try self.named(name, in: "controls")["fields"]?.arrayValue ?? []
        case .structure(let name):
            guard let fields = self.document["structs"]?[name]?["fields"]?.arrayValue else {
                throw SchemaError(description: "no struct \(name) in the schema")
            }
            return fields
        }
    }

    /// An operation's request or response fields; a name instead of a list means that operation's.
    private func operationFields(_ op: String, _ side: String) throws -> [JSONValue] {
        let entry = try self.named(op, in: "operations")[side]
        if let other = entry?.stringValue { return try self.operationFields(other, side) }
        return entry?.arrayValue ?? []
    }

    private func named(_ name: String, in list: String) throws -> JSONValue {
        guard let entry = self.document[list]?.arrayValue?.first(where: { $0["name"]?.stringValue == name }) else {
            throw SchemaError(description: "no \(name) in the schema's \(list)")
        }
        return entry
    }

    /// `rendering` (an object of `message`) with every field of `message` present: absent ones at their defaults,
    /// struct fields completed the same way.
    func withDefaults(_ rendering: JSONValue, as message: Message) throws -> JSONValue {
        guard case .object(let members) = rendering else { return rendering }
        var complete: [(key: String, value: JSONValue)] = []
        for field in try self.fields(of: message) {
            guard let name = field["name"]?.stringValue, let type = field["type"]?.stringValue else { continue }
            let repeated = field["repeated"]?.boolValue ?? false
            let isStruct = self.document["structs"]?[type] != nil
            if let value = rendering[name] {
                if isStruct, repeated, case .array(let elements) = value {
                    complete.append((name, .array(try elements.map { try self.withDefaults($0, as: .structure(type)) })))
                } else if isStruct {
                    complete.append((name, try self.withDefaults(value, as: .structure(type))))
                } else {
                    complete.append((name, value))
                }
            } else {
                complete.append((name, self.defaultValue(of: field, type: type, repeated: repeated, isStruct: isStruct)))
            }
        }
        // Members the schema does not name (none expected) are kept, so nothing is hidden from the matching.
        for member in members where !complete.contains(where: { $0.key == member.key }) { complete.append(member) }
        return .object(complete)
    }

    /// A field's default: Tools/codegen/generate.py's `default_literal` in JSON.
    private func defaultValue(of field: JSONValue, type: String, repeated: Bool, isStruct: Bool) -> JSONValue {
        if repeated { return .array([]) }
        if isStruct { return .null }
        let given = field["default"]
        switch type {
        case "string": return given ?? .string("")
        case "uint", "sint": return given ?? .number("0")
        case "bool": return given ?? .bool(false)
        default:
            if let given { return given }
            if case .object(let values) = self.document["enums"]?[type]?["values"],
                let zero = values.first(where: { $0.value == .number("0") })
            {
                return .string(zero.key)
            }
            return .number("0")
        }
    }

    struct SchemaError: Error, CustomStringConvertible {
        var description: String
    }
}
