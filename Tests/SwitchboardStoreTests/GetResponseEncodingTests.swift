import NIOCore
import SwitchboardStore
import SwitchboardWire
import Testing

/// A get written straight from the store (``MetadataStore/writeGetResponse(of:userId:to:)``) is byte for byte the
/// typed response of the same snapshot.
@Suite("Gets encoded from the store")
struct GetResponseEncodingTests {
    let store = memoryStore()

    private func expectSameAsTyped(_ scope: MetadataScope, userId: String?) throws {
        var direct = ByteBuffer()
        try self.store.writeGetResponse(of: scope, userId: userId, to: &direct)
        let snapshot = self.store.read(scope)
        var typed = ByteBuffer()
        if let userId {
            GetUserMetadataResponse(majorRevision: snapshot.majorRevision, items: snapshot.items, userId: userId).encode(into: &typed)
        } else {
            GetChannelMetadataResponse(majorRevision: snapshot.majorRevision, items: snapshot.items).encode(into: &typed)
        }
        #expect(direct == typed, "\(scope)")
    }

    @Test func absentRemovedAndChangingSetsEncodeAsTheirTypedResponses() async throws {
        let user = MetadataScope.user("Tony")
        let channel = MetadataScope.channel("lobby", type: .stream)
        try self.expectSameAsTyped(user, userId: "Tony")
        try self.expectSameAsTyped(channel, userId: nil)
        var generator = SystemRandomNumberGenerator()
        for step in 0..<200 {
            let scope = step % 2 == 0 ? user : channel
            let keys = (0..<Int.random(in: 1...5, using: &generator)).map { _ in "k\(Int.random(in: 0..<8, using: &generator))" }
            let items = Set(keys).map { item($0, String(repeating: "é", count: Int.random(in: 0...300, using: &generator))) }
            switch step % 5 {
            case 4: _ = try? await self.store.apply(.remove, scope, [])
            case 3: _ = try? await self.store.apply(.remove, scope, [item(keys[0])])
            default:
                try await self.store.apply(.set, scope, items, recordTs: step % 3 == 0, recordUserId: step % 2 == 1, caller: "u\(step)")
            }
            try self.expectSameAsTyped(user, userId: "Tony")
            try self.expectSameAsTyped(channel, userId: nil)
        }
        // The caller's own id is what a get with an empty user id answers with; an empty id writes no field.
        try self.expectSameAsTyped(user, userId: "")
    }

    @Test func anInvalidNameThrowsBeforeWritingAnything() {
        var body = ByteBuffer()
        #expect(throws: SwitchboardStoreError.self) {
            try self.store.writeGetResponse(of: .user(String(repeating: "x", count: 65)), userId: "x", to: &body)
        }
        #expect(body.readableBytes == 0)
    }
}
