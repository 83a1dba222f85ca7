// memcmp, the module's one use of the C library: Darwin on Apple platforms, Glibc or Musl on Linux
// (Tests/SwitchboardClientTests/PlatformImportTests.swift keeps platform imports to this file).
#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Byte-wise comparison of strings, the one implementation the store and the command areas share.
///
/// Swift's `==` and `<` on `String` compare by Unicode canonical equivalence (`"é" == "e\u{301}"`), but the wire,
/// SQLite's BINARY collation and the spec's orders (`Protocol/SPEC.md` §13.3: pages in ascending byte order of user
/// id) compare UTF-8 bytes.
extension String {
    /// -1, 0 or 1 as the string sorts before, with or after `other` by its UTF-8 bytes (memcmp order; a prefix
    /// sorts first).
    @inlinable
    package func utf8Compare(_ other: String) -> Int {
        let contiguous: Int?? = self.utf8.withContiguousStorageIfAvailable { lhs in
            other.utf8.withContiguousStorageIfAvailable { rhs -> Int in
                let common = min(lhs.count, rhs.count)
                if common > 0, let left = lhs.baseAddress, let right = rhs.baseAddress {
                    let order = memcmp(left, right, common)
                    if order != 0 { return order < 0 ? -1 : 1 }
                }
                return lhs.count == rhs.count ? 0 : (lhs.count < rhs.count ? -1 : 1)
            }
        }
        if let contiguous, let order = contiguous { return order }
        // A string without contiguous UTF-8 (bridged): byte by byte.
        var left = self.utf8.makeIterator()
        var right = other.utf8.makeIterator()
        while true {
            switch (left.next(), right.next()) {
            case (nil, nil): return 0
            case (nil, _): return -1
            case (_, nil): return 1
            case (let l?, let r?) where l != r: return l < r ? -1 : 1
            default: continue
            }
        }
    }

    /// Whether the string sorts before `other` by UTF-8 bytes (SQLite's BINARY collation).
    @inlinable
    package func utf8Precedes(_ other: String) -> Bool {
        self.utf8Compare(other) < 0
    }

    /// Whether both strings have exactly the same UTF-8 bytes.
    @inlinable
    package func hasSameUTF8(as other: String) -> Bool {
        self.utf8.count == other.utf8.count && self.utf8Compare(other) == 0
    }

    /// Feeds the string's UTF-8 bytes to `hasher` (consistent with ``hasSameUTF8(as:)``).
    package func hashUTF8(into hasher: inout Hasher) {
        let done: Void? = self.utf8.withContiguousStorageIfAvailable { bytes in
            hasher.combine(bytes: UnsafeRawBufferPointer(bytes))
        }
        if done == nil {
            for byte in self.utf8 { hasher.combine(byte) }
        }
        hasher.combine(self.utf8.count)
    }
}
