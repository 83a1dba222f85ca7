import NIOCore
@testable import SwitchboardServer
import Testing

/// What a connection owes its client, without a connection.
@Suite struct ConnectionOutputTests {
    let allocator = ByteBufferAllocator()

    @Test func anIdleOutputHoldsNoBuffer() {
        var output = ConnectionOutput()
        #expect(output.pending == nil && output.held == nil)
        #expect(output.pendingBytes == 0 && output.heldBytes == 0)
        #expect(output.takePending() == nil)
    }

    /// Appends go into one buffer in place: its storage does not move while frames are added within its capacity.
    @Test func appendsGoIntoOneBufferInPlace() {
        var output = ConnectionOutput()
        output.append(capacity: 1024, allocator: self.allocator) { $0.writeString("one") }
        let storage = output.pending!.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
        for _ in 0..<100 { output.append(capacity: 1024, allocator: self.allocator) { $0.writeString("more") } }
        #expect(output.pendingBytes == 3 + 400)
        #expect(output.pending!.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) } == storage)
        let taken = output.takePending()
        #expect(taken?.readableBytes == 403 && output.pending == nil)
    }

    @Test func aBufferTakenForAppendingComesBackWithWhatWasAdded() {
        var output = ConnectionOutput()
        output.append(capacity: 64, allocator: self.allocator) { $0.writeString("ab") }
        var buffer = output.takeForAppending(capacity: 64, allocator: self.allocator)
        #expect(output.pending == nil, "moved out while the caller appends")
        buffer.writeString("cd")
        output.restorePending(buffer)
        #expect(output.pending.map { String(buffer: $0) } == "abcd")
    }

    @Test func heldPushesKeepTheirOrderAndByteCountAndTheQueueGoesWhenEmpty() {
        var output = ConnectionOutput()
        for text in ["first", "second", "third"] { output.hold(ByteBuffer(string: text)) }
        #expect(output.isHoldingPushes && output.heldBytes == 16)
        #expect(output.firstHeld.map { String(buffer: $0) } == "first")
        var released: [String] = []
        while let frame = output.takeFirstHeld() { released.append(String(buffer: frame)) }
        #expect(released == ["first", "second", "third"])
        #expect(!output.isHoldingPushes && output.held == nil && output.heldBytes == 0)
    }

    @Test func droppingHeldPushesForgetsThemAndTheirBytes() {
        var output = ConnectionOutput()
        output.hold(ByteBuffer(string: "x"))
        output.dropHeldPushes()
        #expect(!output.isHoldingPushes && output.heldBytes == 0)
    }
}
