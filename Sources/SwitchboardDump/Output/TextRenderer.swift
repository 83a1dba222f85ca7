import NIOCore
import SwitchboardWire

/// Readable one-line-per-event output.
///
/// ```
/// @0 #1 control ping len=4 flags=0x00 body={"nonce":42}
/// @5 garbage badHeader(1004): ERROR flag on a control frame; skipped 3 bytes, resynchronised at @8
/// @8 #2 control pong len=4 flags=0x00 body={"nonce":42}
/// 00:22:22.058542 c1 s2c @89 #2 response setUserMetadata id=1 len=5 flags=0x00 answers #2 after 2.683 ms body={"majorRevision":1}
/// ```
/// Proxy-mode lines start with the time (UTC), the connection and the direction. A compressed frame adds
/// `zlib C/I bytes (ratio R)` after its flags. Login tokens print as `<redacted N bytes>` unless ``showsTokens``.
public struct TextRenderer: DumpRenderer {
    /// The default longest body shown before it is cut.
    public static let defaultBodyLimit = 1000

    /// Longest body shown, in characters; 0 shows every body whole.
    public var bodyLimit: Int
    /// Whether login tokens are shown as they are; otherwise they print as `<redacted N bytes>` (``TokenRedaction``).
    public var showsTokens: Bool

    /// Creates a renderer.
    ///
    /// - Parameters:
    ///   - bodyLimit: the longest body shown, in characters; 0 shows every body whole.
    ///   - showsTokens: show login tokens instead of `<redacted N bytes>`.
    public init(bodyLimit: Int = Self.defaultBodyLimit, showsTokens: Bool = false) {
        self.bodyLimit = bodyLimit
        self.showsTokens = showsTokens
    }

    public func render(_ event: DumpEvent) -> String {
        var parts: [String] = []
        if let time = event.time { parts.append(time.timeOfDay) }
        if let connection = event.connection { parts.append("c\(connection)") }
        if let direction = event.direction { parts.append(direction.rawValue) }
        switch event.kind {
        case .frame(let frame):
            parts.append(self.describe(frame))
        case .garbage(let problem):
            parts.append("@\(problem.offset) garbage \(Self.describe(problem.error))" + Self.skipText(problem))
        case .decodingStopped(let problem):
            var text = "@\(problem.offset) decoding stopped: \(Self.describe(problem.error))"
            if let skipped = problem.skippedBytes { text += "; \(skipped) bytes left undecoded" }
            text += "; this direction is still forwarded unchanged but no longer decoded"
            parts.append(text)
        case .unanswered(let request):
            parts.append(
                "#\(request.index) request \(FrameNames.opName(kind: .request, op: request.op)) id=\(request.requestID)"
                    + " @\(request.offset) was never answered")
        case .listening(let address, let upstream):
            parts.append("listening on \(address), forwarding to \(upstream)")
        case .connectionOpened(let client, let upstream):
            parts.append("open: client \(client) -> upstream \(upstream)")
        case .upstreamUnreachable(let client, let reason):
            parts.append("upstream unreachable for client \(client): \(reason); client disconnected")
        case .connectionClosed(let summary):
            parts.append(
                "closed by \(summary.closedBy.rawValue) after "
                    + FixedPoint.format(summary.durationNanoseconds / 1_000_000, decimals: 3) + " s: c2s "
                    + "\(summary.clientToServerBytes) bytes/\(summary.clientToServerFrames) frames, s2c "
                    + "\(summary.serverToClientBytes) bytes/\(summary.serverToClientFrames) frames")
        case .captureFailed(let path, let reason):
            parts.append("capture to \(path) failed: \(reason)")
        case .ruleViolation(let violation):
            parts.append("#\(violation.frameIndex) breaks \(violation.rule): \(violation.message)")
        }
        return parts.joined(separator: " ")
    }

    func describe(_ frame: DumpedFrame) -> String {
        var text = "@\(frame.offset) #\(frame.index) \(FrameNames.className(frame.header.kind)) \(frame.opName)"
        if let id = frame.requestID { text += " id=\(id)" }
        text += " len=\(frame.length) flags=0x" + Self.hexByte(frame.header.flags.rawValue)
        let flagNames = FrameNames.flagNames(frame.header.flags)
        if !flagNames.isEmpty { text += "(" + flagNames.joined(separator: "|") + ")" }
        if let compression = frame.compression {
            text += " zlib \(compression.compressedSize)/\(compression.inflatedSize) bytes (ratio "
                + FixedPoint.ratio(compression.ratio) + ")"
        }
        switch frame.pairing {
        case .answers(let request, let latency)?:
            text += " answers #\(request.index)"
            if request.op != frame.header.op {
                text += " (a \(FrameNames.opName(kind: .request, op: request.op)) request: op differs)"
            }
            if let latency { text += " after " + FixedPoint.milliseconds(nanoseconds: latency.nanoseconds) + " ms" }
        case .unmatched?:
            text += " answers no request in flight"
        case .duplicateRequestID(let earlier)?:
            text += " reuses the id of #\(earlier.index), still in flight"
        case nil:
            break
        }
        switch frame.content {
        case .success(let message):
            text += " " + self.describeBody(message)
        case .failure(let error):
            text += " body not decoded: " + Self.describe(error)
        }
        return text
    }

    private func describeBody(_ message: SwitchboardMessage) -> String {
        if case .unknownPush = message { return "(unknown push, body not decoded)" }
        let rendering = (self.showsTokens ? message : TokenRedaction.redacted(message)).jsonValue
        if let error = rendering["error"] { return "error=" + self.cut(error.description) }
        return "body=" + self.cut((rendering["body"] ?? .object([])).description)
    }

    private func cut(_ text: String) -> String {
        guard self.bodyLimit > 0, text.count > self.bodyLimit else { return text }
        return String(text.prefix(self.bodyLimit)) + "...(\(text.count) chars)"
    }

    static func describe(_ error: SwitchboardWireError) -> String {
        "\(error.code.name)(\(error.code.rawValue)): \(error.message)"
    }

    private static func skipText(_ problem: StreamProblem) -> String {
        let skipped = problem.skippedBytes.map { "skipped \($0) bytes" } ?? "skipped the rest"
        if let resumedAt = problem.resumedAt { return "; \(skipped), resynchronised at @\(resumedAt)" }
        return "; \(skipped), no frame follows"
    }

    private static func hexByte(_ byte: UInt8) -> String {
        let digits = String(byte, radix: 16)
        return byte < 16 ? "0" + digits : digits
    }
}
