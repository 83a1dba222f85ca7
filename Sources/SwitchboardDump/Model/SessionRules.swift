import SwitchboardWire

/// The handshake and feature rules of `Protocol/SPEC.md` §5.1-5.2 that a tap between one client and the gateway can
/// check, frame by frame, in the order the frames passed it.
///
/// - The client's first frame is HELLO, and HELLO comes once (SB-5.1-1); a client never sends WELCOME (SB-5.1-5).
/// - The gateway's first frame is WELCOME or GOAWAY, WELCOME comes once, and a server never sends HELLO (SB-5.1-5).
/// - No compressed frame before WELCOME (SB-5.1-2), nor after it unless WELCOME listed `zlib` (SB-5.2-1, SB-4-1).
///
/// Requests sent right after HELLO, before WELCOME, are allowed (SB-5.1-6).
public struct SessionRules: Sendable {
    /// A frame that broke a rule.
    public struct Violation: Sendable, Hashable {
        /// The rule's id in the spec, such as `SB-5.1-1`.
        public var rule: String
        /// What happened, for a person.
        public var message: String
        /// The frame's number in its direction's stream.
        public var frameIndex: Int

        /// Creates a violation record.
        public init(rule: String, message: String, frameIndex: Int) {
            self.rule = rule
            self.message = message
            self.frameIndex = frameIndex
        }
    }

    private var clientStarted = false
    private var helloSeen = false
    private var serverStarted = false
    private var welcomed = false
    private var zlibNegotiated = false

    /// Rules for a new connection.
    public init() {}

    /// Checks the next frame that passed in `direction`; returns the rules it broke.
    public mutating func observe(_ frame: DumpedFrame, from direction: StreamDirection) -> [Violation] {
        var violations: [Violation] = []
        func violated(_ rule: String, _ message: String) {
            violations.append(Violation(rule: rule, message: message, frameIndex: frame.index))
        }
        let control = frame.header.kind == .control ? ControlOp(rawValue: frame.header.op) : nil
        switch direction {
        case .clientToServer:
            if !self.clientStarted {
                self.clientStarted = true
                if control != .hello { violated("SB-5.1-1", "the client's first frame must be HELLO, not \(Self.name(frame))") }
            } else if control == .hello, self.helloSeen {
                violated("SB-5.1-1", "the client sent HELLO a second time")
            }
            if control == .hello { self.helloSeen = true }
            if control == .welcome { violated("SB-5.1-5", "the client sent WELCOME") }
        case .serverToClient:
            if !self.serverStarted {
                self.serverStarted = true
                if control != .welcome && control != .goAway {
                    violated("SB-5.1-5", "the server's first frame must be WELCOME or GOAWAY, not \(Self.name(frame))")
                }
            } else if control == .welcome, self.welcomed {
                violated("SB-5.1-5", "the server sent WELCOME a second time")
            }
            if control == .hello { violated("SB-5.1-5", "the server sent HELLO") }
        }
        if frame.header.flags.contains(.compressed) {
            if !self.welcomed {
                violated("SB-5.1-2", "a compressed frame before WELCOME")
            } else if !self.zlibNegotiated {
                violated("SB-5.2-1", "a compressed frame on a connection whose WELCOME did not list zlib")
            }
        }
        if direction == .serverToClient, control == .welcome, !self.welcomed {
            self.welcomed = true
            if case .control(.welcome(let welcome))? = frame.message { self.zlibNegotiated = welcome.features.contains("zlib") }
        }
        return violations
    }

    private static func name(_ frame: DumpedFrame) -> String {
        "\(FrameNames.className(frame.header.kind)) \(frame.opName)"
    }
}
