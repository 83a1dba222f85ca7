@testable import SwitchboardStore
import SwitchboardWire
import Testing

/// A scope's table hash (``MetadataScope/_rawHashValue(seed:)``, the cached keyed hash mixed with a table's seed):
/// equal scopes agree, tables find every scope, and different seeds give different bucket orders.
@Suite struct MetadataScopeHashingTests {
    static let scopes: [MetadataScope] = (0..<5_000).map { index in
        switch index % 3 {
        case 0: .user("user-\(index)")
        case 1: .channel("room-\(index)", type: .message)
        default: .channel("room-\(index - 1)", type: .stream)  // the name of a message channel above, as a stream
        }
    }

    @Test func equalScopesHashAlikeUnderEverySeed() {
        for seed in [0, 1, -1, 0x5EED, Int.max] {
            #expect(MetadataScope.user("Tony")._rawHashValue(seed: seed) == MetadataScope.user("Tony")._rawHashValue(seed: seed))
            #expect(
                MetadataScope.channel("lobby", type: .message)._rawHashValue(seed: seed)
                    == MetadataScope(storageType: .channel, channelType: .message, name: "lobby")._rawHashValue(seed: seed))
        }
        #expect(MetadataScope.user("Tony").hashValue == MetadataScope.user("Tony").hashValue)
    }

    @Test func aTableFindsEveryScopeAndNoOther() {
        var table: [MetadataScope: Int] = [:]
        for (index, scope) in Self.scopes.enumerated() { table[scope] = index }
        #expect(table.count == Self.scopes.count, "a channel's message and stream sets are two keys")
        for (index, scope) in Self.scopes.enumerated() { #expect(table[scope] == index) }
        #expect(table[.channel("room-1", type: .stream)] == 2, "room-1 exists as a message and as a stream channel")
        #expect(table[.user("nobody")] == nil && table[.channel("room-0", type: .stream)] == nil)
        #expect(table[.channel("room-2", type: .message)] == nil && table[.user("room-1")] == nil)
        // Copied into a smaller table and back (the case per-table seeds are for), nothing is lost.
        let half = table.filter { $0.value % 2 == 0 }
        #expect(half.count == (Self.scopes.count + 1) / 2)
        for (scope, index) in half { #expect(table[scope] == index) }
    }

    @Test func theSeedChangesTheHash() {
        let scope = MetadataScope.user("Tony")
        let hashes = Set([0, 1, 2, 3, 1 << 40].map { scope._rawHashValue(seed: $0) })
        #expect(hashes.count == 5)
        // The low bits a small table uses are spread, whatever the seed: 5,000 scopes over 64 buckets.
        for seed in [0, 12_345] {
            var buckets = [Int](repeating: 0, count: 64)
            for scope in Self.scopes { buckets[scope._rawHashValue(seed: seed) & 63] += 1 }
            #expect(buckets.min()! > 40 && buckets.max()! < 120, "seed \(seed): \(buckets)")
        }
    }
}
