import NIOCore
import SwitchboardWire

/// Dumps one recorded byte stream (a capture file, or stdin): frames, garbage with resynchronisation, and
/// request/response pairing within the stream (when it holds both directions, see ``RequestPairing``).
///
/// Feed it bytes as they come with ``append(_:)`` and end with ``finish()``; or dump a whole buffer at once with
/// ``dump(_:limits:direction:)``. Whatever the bytes, it reports and goes on; it never throws.
public struct StreamDumper: Sendable {
    private var scanner: FrameScanner
    private var pairing = RequestPairing(evidenceRequired: true)

    /// Creates a dumper.
    ///
    /// - Parameters:
    ///   - limits: the largest frame and inflated body to accept, and whether compressed frames are (the default
    ///     limits accept them: a recording does not say whether zlib was negotiated).
    ///   - direction: the classes of frame the stream may hold; `.any` for a capture of both directions.
    public init(limits: FrameLimits = .default, direction: FrameDirection = .any) {
        self.scanner = FrameScanner(limits: limits, direction: direction, recovery: .resynchronize)
    }

    /// Appends the next bytes of the stream; returns what they decided.
    public mutating func append(_ bytes: ByteBuffer) -> [DumpEvent] {
        self.scanner.append(bytes)
        var events: [DumpEvent] = []
        while let event = self.scanner.next() { events.append(self.event(for: event)) }
        return events
    }

    /// Ends the stream; returns the last frames and problems, then the requests that were never answered.
    public mutating func finish() -> [DumpEvent] {
        var events = self.scanner.finish().map { self.event(for: $0) }
        events += self.pairing.takeUnanswered().map { DumpEvent(.unanswered($0)) }
        return events
    }

    /// Dumps a whole stream.
    public static func dump(
        _ bytes: ByteBuffer, limits: FrameLimits = .default, direction: FrameDirection = .any
    ) -> [DumpEvent] {
        var dumper = StreamDumper(limits: limits, direction: direction)
        return dumper.append(bytes) + dumper.finish()
    }

    private mutating func event(for scanned: ScanEvent) -> DumpEvent {
        switch scanned {
        case .frame(var frame):
            self.pairing.observe(&frame)
            return DumpEvent(.frame(frame))
        case .garbage(let problem), .stopped(let problem):
            return DumpEvent(.garbage(problem))
        }
    }
}
