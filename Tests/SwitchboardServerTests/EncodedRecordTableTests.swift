import NIOCore
@testable import SwitchboardServer
import SwitchboardWire
import Testing

/// Batch reads are answered from stored encodings; the bytes must be what encoding the typed response gives.
@Suite struct EncodedRecordTableTests {
    private static func user(_ index: Int) -> UserInfo {
        UserInfo(
            userId: "user-\(index)", name: index % 3 == 0 ? "" : "name \(index) é日", portraitUri: "p://\(index)",
            extra: String(repeating: "x", count: index * 7), updatedAtMs: UInt64(index) * 1_000_003)
    }

    @Test func aBatchFromStoredEncodingsEqualsTheTypedResponseEncoding() throws {
        var table: EncodedRecordTable<UserInfo> = [:]
        for index in 0..<50 { table["user-\(index)"] = Self.user(index) }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let ids = (0..<Int.random(in: 1...100, using: &generator)).map { _ in "user-\(Int.random(in: 0..<70, using: &generator))" }
            var fast = ByteBuffer()
            table.appendFields(ids, recordField: 1, missingField: 2, to: &fast)
            // The typed response: each id once, first occurrence, records then missing ids.
            var seen = Set<String>()
            let unique = ids.filter { seen.insert($0).inserted }
            let typed = GetUserInfoResponse(
                users: unique.compactMap { table[$0] }, missing: unique.filter { table[$0] == nil })
            var expected = ByteBuffer()
            typed.encode(into: &expected)
            #expect(fast == expected, "ids \(ids)")
            #expect(try GetUserInfoResponse(decoding: fast) == typed)
        }
    }

    @Test func replacingAndRemovingARecordChangesWhatIsSent() throws {
        var table: EncodedRecordTable<UserInfo> = ["a": UserInfo(userId: "a", name: "first")]
        table["a"] = UserInfo(userId: "a", name: "second")
        var body = ByteBuffer()
        table.appendFields(["a"], recordField: 1, missingField: 2, to: &body)
        #expect(try GetUserInfoResponse(decoding: body).users.map(\.name) == ["second"])
        #expect(table.removeValue(forKey: "a")?.name == "second")
        body.clear()
        table.appendFields(["a", "a"], recordField: 1, missingField: 2, to: &body)
        #expect(try GetUserInfoResponse(decoding: body) == GetUserInfoResponse(missing: ["a"]))
        #expect(table.isEmpty && table.values.isEmpty)
    }

    @Test func theIdentitySetTellsRepeatsAcrossGrowthOfManyObjects() {
        final class Box {}
        let boxes = (0..<300).map { _ in Box() }
        var set = IdentitySet(capacity: boxes.count)
        for box in boxes {
            let inserted = set.insert(ObjectIdentifier(box))
            #expect(inserted)
        }
        for box in boxes.reversed() {
            let inserted = set.insert(ObjectIdentifier(box))
            #expect(!inserted)
        }
    }
}
