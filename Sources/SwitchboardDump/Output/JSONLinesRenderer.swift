import NIOCore
import SwitchboardWire

/// One JSON object per event, on one line.
///
/// Every object has `event` (`frame`, `garbage`, `decodingStopped`, `unanswered`, `listening`, `open`,
/// `upstreamUnreachable`, `close`, `captureFailed`); proxy-mode objects add `time` (RFC 3339, UTC), `connection` and
/// `direction` (`c2s` or `s2c`). A frame's `message` is its canonical JSON rendering (`Protocol/SPEC.md` §10.1),
/// exactly as the test vectors write it, except that login tokens print as `<redacted N bytes>` unless
/// ``showsTokens``.
public struct JSONLinesRenderer: DumpRenderer {
    /// Whether login tokens are shown as they are; otherwise they print as `<redacted N bytes>` (``TokenRedaction``).
    public var showsTokens: Bool

    /// Creates a renderer.
    ///
    /// - Parameter showsTokens: show login tokens instead of `<redacted N bytes>`.
    public init(showsTokens: Bool = false) {
        self.showsTokens = showsTokens
    }

    public func render(_ event: DumpEvent) -> String {
        self.jsonValue(event).description
    }

    /// The event as a JSON object.
    public func jsonValue(_ event: DumpEvent) -> JSONValue {
        var members: [(key: String, value: JSONValue)] = []
        func add(_ key: String, _ value: JSONValue) { members.append((key, value)) }
        let name: String
        switch event.kind {
        case .frame: name = "frame"
        case .garbage: name = "garbage"
        case .decodingStopped: name = "decodingStopped"
        case .unanswered: name = "unanswered"
        case .listening: name = "listening"
        case .connectionOpened: name = "open"
        case .upstreamUnreachable: name = "upstreamUnreachable"
        case .connectionClosed: name = "close"
        case .captureFailed: name = "captureFailed"
        case .ruleViolation: name = "violation"
        }
        add("event", .string(name))
        if let time = event.time { add("time", .string(time.iso8601)) }
        if let connection = event.connection { add("connection", .uint(connection)) }
        if let direction = event.direction { add("direction", .string(direction.rawValue)) }

        switch event.kind {
        case .frame(let frame):
            members += Self.members(of: frame, showsTokens: self.showsTokens)
        case .garbage(let problem), .decodingStopped(let problem):
            add("offset", .uint(UInt64(problem.offset)))
            add("error", Self.jsonValue(problem.error))
            if let skipped = problem.skippedBytes { add("skippedBytes", .uint(UInt64(skipped))) }
            if let resumedAt = problem.resumedAt { add("resumedAt", .uint(UInt64(resumedAt))) }
        case .unanswered(let request):
            add("frame", .uint(UInt64(request.index)))
            add("offset", .uint(UInt64(request.offset)))
            add("op", .string(FrameNames.opName(kind: .request, op: request.op)))
            add("requestId", .uint(UInt64(request.requestID)))
        case .listening(let address, let upstream):
            add("address", .string(address))
            add("upstream", .string(upstream))
        case .connectionOpened(let client, let upstream):
            add("client", .string(client))
            add("upstream", .string(upstream))
        case .upstreamUnreachable(let client, let reason):
            add("client", .string(client))
            add("reason", .string(reason))
        case .connectionClosed(let summary):
            add("closedBy", .string(summary.closedBy.rawValue))
            add("durationMs", .number(FixedPoint.milliseconds(nanoseconds: summary.durationNanoseconds)))
            add(
                "c2s",
                .object([
                    ("bytes", .uint(UInt64(summary.clientToServerBytes))),
                    ("frames", .uint(UInt64(summary.clientToServerFrames))),
                ]))
            add(
                "s2c",
                .object([
                    ("bytes", .uint(UInt64(summary.serverToClientBytes))),
                    ("frames", .uint(UInt64(summary.serverToClientFrames))),
                ]))
        case .captureFailed(let path, let reason):
            add("path", .string(path))
            add("reason", .string(reason))
        case .ruleViolation(let violation):
            add("frame", .uint(UInt64(violation.frameIndex)))
            add("rule", .string(violation.rule))
            add("message", .string(violation.message))
        }
        return .object(members)
    }

    private static func members(of frame: DumpedFrame, showsTokens: Bool) -> [(key: String, value: JSONValue)] {
        var members: [(key: String, value: JSONValue)] = [
            ("offset", .uint(UInt64(frame.offset))),
            ("frame", .uint(UInt64(frame.index))),
            ("size", .uint(UInt64(frame.wireSize))),
            ("length", .uint(UInt64(frame.length))),
            ("flags", .uint(UInt64(frame.header.flags.rawValue))),
            ("flagNames", .array(FrameNames.flagNames(frame.header.flags).map(JSONValue.string))),
            ("class", .string(FrameNames.className(frame.header.kind))),
            ("op", .uint(UInt64(frame.header.op))),
            ("opName", .string(frame.opName)),
        ]
        if let id = frame.requestID { members.append(("requestId", .uint(UInt64(id)))) }
        if let compression = frame.compression {
            members.append(
                (
                    "compression",
                    .object([
                        ("compressedBytes", .uint(UInt64(compression.compressedSize))),
                        ("inflatedBytes", .uint(UInt64(compression.inflatedSize))),
                        ("ratio", .number(FixedPoint.ratio(compression.ratio))),
                    ])
                ))
        }
        switch frame.pairing {
        case .answers(let request, let latency)?:
            var answers: [(key: String, value: JSONValue)] = [
                ("frame", .uint(UInt64(request.index))), ("offset", .uint(UInt64(request.offset))),
                ("op", .string(FrameNames.opName(kind: .request, op: request.op))),
            ]
            if let latency {
                answers.append(("latencyMs", .number(FixedPoint.milliseconds(nanoseconds: latency.nanoseconds))))
            }
            members.append(("answers", .object(answers)))
        case .unmatched?:
            members.append(("unmatchedResponse", .bool(true)))
        case .duplicateRequestID(let earlier)?:
            members.append(
                (
                    "duplicateOf",
                    .object([("frame", .uint(UInt64(earlier.index))), ("offset", .uint(UInt64(earlier.offset)))])
                ))
        case nil:
            break
        }
        switch frame.content {
        case .success(let message):
            members.append(("message", (showsTokens ? message : TokenRedaction.redacted(message)).jsonValue))
        case .failure(let error): members.append(("bodyError", Self.jsonValue(error)))
        }
        return members
    }

    static func jsonValue(_ error: SwitchboardWireError) -> JSONValue {
        var members: [(key: String, value: JSONValue)] = [("code", .uint(UInt64(error.code.rawValue)))]
        if let name = error.code.nameIfKnown { members.append(("name", .string(name))) }
        members.append(("message", .string(error.message)))
        return .object(members)
    }
}
