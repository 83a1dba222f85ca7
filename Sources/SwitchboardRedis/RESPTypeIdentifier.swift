/// The first byte of a RESP value (https://redis.io/docs/latest/develop/reference/protocol-spec/): what kind of value
/// follows. RESP2 has the first five; a server that was sent `HELLO 3` may send the others.
public enum RESPTypeIdentifier: UInt8, Sendable, Hashable, CaseIterable {
    /// `+OK\r\n`
    case simpleString = 0x2B  // +
    /// `-ERR message\r\n`
    case simpleError = 0x2D  // -
    /// `:42\r\n`
    case integer = 0x3A  // :
    /// `$3\r\nabc\r\n`; RESP2's null is `$-1\r\n`.
    case bulkString = 0x24  // $
    /// `*2\r\n...`; RESP2's null array is `*-1\r\n`.
    case array = 0x2A  // *
    /// `_\r\n` (RESP3)
    case null = 0x5F  // _
    /// `#t\r\n` or `#f\r\n` (RESP3)
    case boolean = 0x23  // #
    /// `,1.5\r\n`, `,inf\r\n`, `,nan\r\n` (RESP3)
    case double = 0x2C  // ,
    /// `(3492890328409238509324850943850943825024385\r\n` (RESP3)
    case bigNumber = 0x28  // (
    /// `!21\r\nSYNTAX invalid syntax\r\n` (RESP3)
    case bulkError = 0x21  // !
    /// `=15\r\ntxt:Some string\r\n`: three bytes of format, a colon, the text (RESP3)
    case verbatimString = 0x3D  // =
    /// `%2\r\n` and two key-value pairs (RESP3)
    case map = 0x25  // %
    /// `~2\r\n` and two elements (RESP3)
    case set = 0x7E  // ~
    /// `|1\r\n` and one key-value pair: data about the reply that follows it (RESP3)
    case attribute = 0x7C  // |
    /// `>3\r\n` and three elements: a message the server sends on its own, e.g. a pub/sub message (RESP3)
    case push = 0x3E  // >

    /// Whether elements follow the header line (arrays, maps, sets, attributes, pushes).
    @inlinable
    public var isAggregate: Bool {
        switch self {
        case .array, .map, .set, .attribute, .push: return true
        default: return false
        }
    }

    /// Whether a length and that many bytes follow the type byte (bulk strings and errors, verbatim strings).
    @inlinable
    public var isBlob: Bool {
        switch self {
        case .bulkString, .bulkError, .verbatimString: return true
        default: return false
        }
    }
}
