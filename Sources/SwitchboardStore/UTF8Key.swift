extension String {
    /// Whether both strings have exactly the same UTF-8 bytes.
    ///
    /// Swift's `==` compares by Unicode canonical equivalence (`"é" == "e\u{301}"`), but the wire and SQLite
    /// compare bytes. The store compares names and keys byte-wise everywhere, so that memory and disk always agree
    /// on which keys are the same.
    func hasSameUTF8(as other: String) -> Bool {
        let lhs = self.utf8
        let rhs = other.utf8
        guard lhs.count == rhs.count else { return false }
        let contiguous = lhs.withContiguousStorageIfAvailable { left in
            rhs.withContiguousStorageIfAvailable { right in left.elementsEqual(right) }
        }
        if let result = contiguous ?? nil { return result }
        return lhs.elementsEqual(rhs)
    }

    /// Feeds the string's UTF-8 bytes to `hasher` (consistent with ``hasSameUTF8(as:)``).
    func hashUTF8(into hasher: inout Hasher) {
        let done: Void? = self.utf8.withContiguousStorageIfAvailable { bytes in
            hasher.combine(bytes: UnsafeRawBufferPointer(bytes))
        }
        if done == nil {
            for byte in self.utf8 { hasher.combine(byte) }
        }
        hasher.combine(self.utf8.count)
    }
}

/// A string used as a dictionary or set key with byte-wise equality (see ``Swift/String/hasSameUTF8(as:)``).
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
