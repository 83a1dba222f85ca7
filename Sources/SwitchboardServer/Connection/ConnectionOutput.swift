import NIOCore

/// What one connection owes its client and has not handed to the socket yet.
///
/// Two parts: this tick's frames (replies, PONGs, GOAWAY, small pushes), encoded back to back into one buffer and
/// written once at the end of the read or the tick; and the pushes held while the channel's small write window is
/// full (SB-5.9-2, SB-5.6-2), which wait here so that replies can pass them. ``ConnectionHandler`` owns the value
/// and does the writing; this type only keeps the bytes and their counts. Both parts are created on first use and
/// dropped when empty, so an idle connection holds no buffer.
struct ConnectionOutput {
    /// This tick's frames, nil while there are none.
    private(set) var pending: ByteBuffer?
    /// Shared push buffers were written to the channel and await the next flush.
    var writtenUnflushed = false
    /// Pushes waiting for the channel's write window, oldest first.
    /// (`CircularBuffer()` allocates room for 16 at once; the queue starts with 4.)
    private(set) var held: CircularBuffer<ByteBuffer>?
    /// Bytes of the held pushes.
    private(set) var heldBytes = 0

    /// Bytes of this tick's frames.
    var pendingBytes: Int { self.pending?.readableBytes ?? 0 }

    /// Whether pushes are held (later pushes must wait behind them, to keep their order).
    var isHoldingPushes: Bool { self.held != nil }

    /// Appends frames to this tick's output in place: `write` gets the buffer (created with `capacity` when there
    /// is none yet) as the only reference to it, so appending never copies what is there.
    mutating func append(capacity: Int, allocator: ByteBufferAllocator, _ write: (inout ByteBuffer) -> Void) {
        if self.pending == nil { self.pending = allocator.buffer(capacity: capacity) }
        write(&self.pending!)
    }

    /// Takes this tick's output to write it; nil when there is none.
    mutating func takePending() -> ByteBuffer? {
        defer { self.pending = nil }
        return self.pending
    }

    /// Takes this tick's output (or a new buffer of `capacity`) for a caller that appends to it and gives it back
    /// with ``restorePending(_:)``: moved out, so that it stays the only reference while the caller appends.
    mutating func takeForAppending(capacity: Int, allocator: ByteBufferAllocator) -> ByteBuffer {
        if let pending = self.takePending() { return pending }
        return allocator.buffer(capacity: capacity)
    }

    /// Gives back what ``takeForAppending(capacity:allocator:)`` took (nil: nothing to keep).
    mutating func restorePending(_ buffer: ByteBuffer?) {
        self.pending = buffer
    }

    /// Holds a push behind the ones already waiting.
    mutating func hold(_ frame: ByteBuffer) {
        if self.held == nil { self.held = CircularBuffer(initialCapacity: 4) }
        self.held!.append(frame)
        self.heldBytes += frame.readableBytes
    }

    /// The oldest held push, without taking it.
    var firstHeld: ByteBuffer? { self.held?.first }

    /// Takes the oldest held push.
    mutating func takeFirstHeld() -> ByteBuffer? {
        guard let frame = self.held?.popFirst() else { return nil }
        if self.held!.isEmpty { self.held = nil }
        self.heldBytes -= frame.readableBytes
        return frame
    }

    /// Forgets the held pushes (the connection is closing: they would never be read).
    mutating func dropHeldPushes() {
        self.held = nil
        self.heldBytes = 0
    }
}
