import SwitchboardWire

/// A string used as a dictionary or set key with byte-wise equality (see ``Swift/String/hasSameUTF8(as:)``, shared
/// with the command areas in SwitchboardWire): memory and disk always agree on which keys are the same.
struct UTF8Key: Hashable, Sendable {
    let string: String

    init(_ string: String) {
        self.string = string
    }

    static func == (lhs: UTF8Key, rhs: UTF8Key) -> Bool {
        lhs.string.hasSameUTF8(as: rhs.string)
    }

    func hash(into hasher: inout Hasher) {
        self.string.hashUTF8(into: &hasher)
    }
}
