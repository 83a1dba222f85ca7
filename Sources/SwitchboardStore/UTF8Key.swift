#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension String {
    /// Whether both strings have exactly the same UTF-8 bytes.
    ///
    /// Swift's `==` compares by Unicode canonical equivalence (`"é" == "e\u{301}"`), but the wire and SQLite
    /// compare bytes. The store compares names and keys byte-wise everywhere, so that memory and disk always agree
    /// on which keys are the same.
    package func hasSameUTF8(as other: String) -> Bool {
        let lhs = self.utf8
        let rhs = other.utf8
        guard lhs.count == rhs.count else { return false }
        if let order = self.compareUTF8(other) { return order == 0 }
        return lhs.elementsEqual(rhs)
    }

    /// Whether the string sorts before `other` by UTF-8 bytes (SQLite's BINARY collation).
    func utf8Precedes(_ other: String) -> Bool {
        if let order = self.compareUTF8(other) { return order < 0 }
        return self.utf8.lexicographicallyPrecedes(other.utf8)
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

    /// memcmp-style comparison of the UTF-8 bytes; nil when either string has no contiguous UTF-8 storage.
    private func compareUTF8(_ other: String) -> Int32? {
        let result = self.utf8.withContiguousStorageIfAvailable { lhs in
            other.utf8.withContiguousStorageIfAvailable { rhs -> Int32 in
                let common = min(lhs.count, rhs.count)
                if common > 0, let left = lhs.baseAddress, let right = rhs.baseAddress {
                    let order = memcmp(left, right, common)
                    if order != 0 { return order }
                }
                return lhs.count == rhs.count ? 0 : (lhs.count < rhs.count ? -1 : 1)
            }
        }
        return result ?? nil
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
