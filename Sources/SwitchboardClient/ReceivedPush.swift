import SwitchboardWire

/// A push as it arrived: the push, and whether its frame carried the COMPRESSED flag (`Protocol/SPEC.md` §4: the
/// server compresses bodies of at least `WELCOME.compressThreshold` bytes once zlib is negotiated). The push itself
/// is the same either way; the flag is for diagnostics and conformance checks.
public struct ReceivedPush: Sendable, Hashable {
    /// The push.
    public var push: Push
    /// Whether its frame was compressed on the wire.
    public var compressed: Bool

    /// Creates a value.
    public init(push: Push, compressed: Bool) {
        self.push = push
        self.compressed = compressed
    }
}

/// The pushes of a connection's ``ReceivedPush`` stream without their flags, read from the same stream: each push goes
/// to whichever of the two is read (a connection's pushes have one reader).
final class PushesWithoutFlags: @unchecked Sendable {
    // Unchecked: the iterator is used by one reader at a time, as an `AsyncStream`'s own iterator is.
    private var iterator: AsyncStream<ReceivedPush>.AsyncIterator

    init(_ received: AsyncStream<ReceivedPush>) { self.iterator = received.makeAsyncIterator() }

    func next() async -> Push? { await self.iterator.next()?.push }
}
