/// A value with a canonical JSON rendering (`Protocol/SPEC.md` §10): fields by name, defaults omitted.
public protocol JSONRepresentable {
    /// The canonical JSON rendering.
    var jsonValue: JSONValue { get }
    /// Reads the rendering back; absent fields take their defaults, unknown fields are an error.
    init(json: JSONValue) throws(SwitchboardWireError)
}

/// Typed reads of JSON members for the generated `init(json:)` code.
public enum JSONField {
    static func failure(_ field: String, _ expected: String, _ value: JSONValue) -> SwitchboardWireError {
        SwitchboardWireError(.malformedBody, "json: \(field) must be \(expected), found \(value)")
    }

    /// Members of an object.
    public static func object(
        _ value: JSONValue, _ field: String
    ) throws(SwitchboardWireError) -> [(key: String, value: JSONValue)] {
        guard case .object(let members) = value else { throw failure(field, "an object", value) }
        return members
    }

    /// Elements of an array.
    public static func array(_ value: JSONValue, _ field: String) throws(SwitchboardWireError) -> [JSONValue] {
        guard case .array(let elements) = value else { throw failure(field, "an array", value) }
        return elements
    }

    /// A string.
    public static func string(_ value: JSONValue, _ field: String) throws(SwitchboardWireError) -> String {
        guard let text = value.stringValue else { throw failure(field, "a string", value) }
        return text
    }

    /// An unsigned 64-bit integer.
    public static func uint64(_ value: JSONValue, _ field: String) throws(SwitchboardWireError) -> UInt64 {
        guard let number = value.uint64Value else { throw failure(field, "an unsigned integer", value) }
        return number
    }

    /// A signed 64-bit integer.
    public static func int64(_ value: JSONValue, _ field: String) throws(SwitchboardWireError) -> Int64 {
        guard let number = value.int64Value else { throw failure(field, "a signed integer", value) }
        return number
    }

    /// A bool.
    public static func bool(_ value: JSONValue, _ field: String) throws(SwitchboardWireError) -> Bool {
        guard let flag = value.boolValue else { throw failure(field, "true or false", value) }
        return flag
    }
}
