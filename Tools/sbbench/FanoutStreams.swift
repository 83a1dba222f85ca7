/// What the fan-out reader does with the bytes its subscribers receive: splits them into messages (Switchboard
/// frames, Redis pushes) and attributes each delivery to its event, without allocating.
protocol FanoutStreamScanner: Sendable {
    /// Handles the whole messages at the front of `bytes`, which `subscriber` received at `now`, and returns how
    /// many bytes they took; the rest is the start of a message the next read completes, and comes again then.
    /// Returns nil when the stream cannot be split any further (the connection is then given up, after the
    /// scanner counted what it could not parse).
    ///
    /// - Parameter replies: Where to append bytes to send back on this connection (PONG answering a PING).
    mutating func scan(_ bytes: UnsafeRawBufferPointer, subscriber: Int, at now: UInt64, replies: inout [UInt8]) -> Int?
}

/// The subscribers' byte streams as the reader receives them: every read goes to the scanner at once; only the
/// tail of a message cut by the end of a read is copied, into a buffer of that subscriber, until the read that
/// completes it.
struct FanoutStreams<Scanner: FanoutStreamScanner>: Sendable {
    var scanner: Scanner
    /// Per subscriber, the received bytes of a message not yet complete (empty almost always).
    private(set) var partial: [[UInt8]]
    /// Bytes the scanner asked to send back on the connection of the last read; the caller sends and clears them.
    var replies: [UInt8] = []

    init(scanner: Scanner, subscribers: Int) {
        self.scanner = scanner
        self.partial = Array(repeating: [], count: subscribers)
    }

    /// Handles one read of `subscriber`'s connection, received at `now`; false when the stream cannot be parsed
    /// any further.
    mutating func received(_ bytes: UnsafeRawBufferPointer, subscriber: Int, at now: UInt64) -> Bool {
        guard !bytes.isEmpty else { return true }
        if self.partial[subscriber].isEmpty {
            guard let consumed = self.scanner.scan(bytes, subscriber: subscriber, at: now, replies: &self.replies) else {
                return false
            }
            if consumed < bytes.count { self.partial[subscriber].append(contentsOf: bytes[consumed...]) }
            return true
        }
        // Take the subscriber's buffer out while the scanner runs over it, so neither is copied.
        var whole: [UInt8] = []
        swap(&whole, &self.partial[subscriber])
        defer { swap(&whole, &self.partial[subscriber]) }
        whole.append(contentsOf: bytes)
        let consumed = whole.withUnsafeBytes { whole in
            self.scanner.scan(whole, subscriber: subscriber, at: now, replies: &self.replies)
        }
        guard let consumed else { return false }
        if consumed == whole.count {
            whole.removeAll(keepingCapacity: true)
        } else {
            whole.removeFirst(consumed)
        }
        return true
    }
}
