import NIOCore
@testable import SwitchboardServer
import SwitchboardStore
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
            table.appendFields(ids, missingField: 2, to: &fast)
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
        table.appendFields(["a"], missingField: 2, to: &body)
        #expect(try GetUserInfoResponse(decoding: body).users.map(\.name) == ["second"])
        #expect(table.removeValue(forKey: "a")?.name == "second")
        body.clear()
        table.appendFields(["a", "a"], missingField: 2, to: &body)
        #expect(try GetUserInfoResponse(decoding: body) == GetUserInfoResponse(missing: ["a"]))
        #expect(table.isEmpty && table.values.isEmpty)
    }

    /// What `appendFields(readingIDsFrom:...)` writes for an encoded request body, or nil when it declines.
    private static func answer(_ table: EncodedRecordTable<UserInfo>, body: ByteBuffer) throws -> ByteBuffer? {
        var answer = ByteBuffer()
        let plain = try WireReader.read(body) { (reader: inout WireReader) throws(SwitchboardWireError) -> Bool in
            try table.appendFields(
                readingIDsFrom: &reader, idField: 1, maxIDs: 100, maxIDBytes: 64, missingField: 2, to: &answer)
        }
        return plain ? answer : nil
    }

    @Test func idsReadFromTheEncodedRequestGiveTheSameAnswerAsTheTypedPath() throws {
        var table: EncodedRecordTable<UserInfo> = [:]
        let ids = (0..<60).map { "user-\($0)" } + ["é", "日本語のユーザー", String(repeating: "z", count: 64), "a", "ab", "abcdefgh", "abcdefghi"]
        for (index, id) in ids.enumerated() where index % 4 != 3 { table[id] = UserInfo(userId: id, name: "n\(index)") }
        var generator = SystemRandomNumberGenerator()
        for round in 0..<300 {
            let batch = (0..<Int.random(in: 1...100, using: &generator)).map { _ in ids.randomElement(using: &generator)! }
            var request = ByteBuffer()
            GetUserInfoRequest(userIds: batch).encode(into: &request)
            if round % 3 == 0 {
                // An unknown field (forward compatibility) is skipped, as the typed decoder skips it.
                request.writeBytes([0x28, 0x07])  // field 5, varint 7
            }
            var typed = ByteBuffer()
            table.appendFields(batch, missingField: 2, to: &typed)
            #expect(try Self.answer(table, body: request) == typed, "batch \(batch)")
        }
    }

    @Test func idsThatAreNotThePlainCaseAreLeftToTheTypedPath() throws {
        let table: EncodedRecordTable<UserInfo> = ["a": UserInfo(userId: "a")]
        func body(_ ids: [String]) -> ByteBuffer {
            var buffer = ByteBuffer()
            GetUserInfoRequest(userIds: ids).encode(into: &buffer)
            return buffer
        }
        #expect(try Self.answer(table, body: ByteBuffer()) == nil, "no ids")
        #expect(try Self.answer(table, body: body(Array(repeating: "a", count: 101))) == nil, "101 ids")
        #expect(try Self.answer(table, body: body(["a", ""])) == nil, "an empty id")
        #expect(try Self.answer(table, body: body(["a", String(repeating: "b", count: 65)])) == nil, "a 65-byte id")
        #expect(try Self.answer(table, body: body(Array(repeating: "a", count: 100))) != nil, "100 ids")
        let invalid = ByteBuffer(bytes: [0x0A, 0x02, 0xC3, 0x28])  // field 1: C3 28 is not UTF-8
        #expect(throws: SwitchboardWireError.self) { try Self.answer(table, body: invalid) }
        let wrongType = ByteBuffer(bytes: [0x08, 0x01])  // field 1 as a varint
        #expect(try Self.answer(table, body: wrongType) == nil)
    }

    @Test func theTableAgreesWithADictionaryThroughInsertsReplacementsAndRemovals() {
        var table = EncodedRecordTable<UserInfo>()
        var model: [String: UserInfo] = [:]
        var generator = SystemRandomNumberGenerator()
        for step in 0..<20_000 {
            let id = "u\(Int.random(in: 0..<1_500, using: &generator))"
            switch Int.random(in: 0..<3, using: &generator) {
            case 0, 1:
                let record = UserInfo(userId: id, name: "\(step)")
                table[id] = record
                model[id] = record
            default:
                #expect(table.removeValue(forKey: id) == model.removeValue(forKey: id))
            }
            if step % 1_000 == 0 {
                #expect(table.count == model.count)
                for (id, record) in model { #expect(table[id] == record) }
            }
        }
        #expect(Set(table.keys) == Set(model.keys))
        #expect(table.values.count == model.count)
        for id in model.keys { table.removeValue(forKey: id) }
        #expect(table.isEmpty && table.keys.isEmpty)
        #expect(table["u1"] == nil)
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
