import NIOCore
import SwitchboardDump
import SwitchboardWire
import Testing

/// `SessionRules` on frame sequences built with the codec, in the order a tap would see them.
@Suite struct SessionRulesTests {
    private struct Step {
        var direction: StreamDirection
        var message: SwitchboardMessage
        var compressed = false
    }

    private static func c2s(_ message: SwitchboardMessage, compressed: Bool = false) -> Step {
        Step(direction: .clientToServer, message: message, compressed: compressed)
    }

    private static func s2c(_ message: SwitchboardMessage, compressed: Bool = false) -> Step {
        Step(direction: .serverToClient, message: message, compressed: compressed)
    }

    private static let hello = SwitchboardMessage.control(.hello(Hello(protocolVersion: 1, features: ["zlib"], userId: "Tony")))
    private static func welcome(_ features: [String]) -> SwitchboardMessage {
        .control(.welcome(Welcome(features: features, userId: "Tony")))
    }
    /// A request whose body zlib makes smaller, so that it is really sent compressed.
    private static let bigRequest = SwitchboardMessage.request(
        id: 1, .getUserMetadata(GetUserMetadataRequest(userId: String(repeating: "ab", count: 30))))

    /// The rules each step broke, in order.
    private static func check(_ steps: [Step]) -> [String] {
        var rules = SessionRules()
        var decoders: [StreamDirection: StreamDumper] = [
            .clientToServer: StreamDumper(direction: .clientToServer), .serverToClient: StreamDumper(direction: .serverToClient),
        ]
        var broken: [String] = []
        for step in steps {
            var bytes = ByteBuffer()
            FrameEncoder(compressionThreshold: step.compressed ? 1 : nil).encode(step.message, into: &bytes)
            let frames = decoders[step.direction]!.append(bytes).compactMap(\.frame)
            #expect(frames.count == 1 && frames[0].header.flags.contains(.compressed) == step.compressed)
            for frame in frames { broken += rules.observe(frame, from: step.direction).map(\.rule) }
        }
        return broken
    }

    @Test func aCorrectSessionBreaksNothing() {
        let ping = SwitchboardMessage.control(.ping(Ping(nonce: 1)))
        #expect(Self.check([
            Self.c2s(Self.hello),
            Self.c2s(.request(id: 1, .getUserMetadata(GetUserMetadataRequest(userId: "Tony")))),  // before WELCOME: allowed
            Self.s2c(Self.welcome(["zlib"])),
            Self.c2s(Self.bigRequest, compressed: true),
            Self.s2c(.push(.serverNotice(ServerNotice(message: String(repeating: "x", count: 100)))), compressed: true),
            Self.c2s(ping), Self.s2c(.control(.pong(Pong(nonce: 1)))),
        ]).isEmpty)
        // A full server answers GOAWAY first.
        #expect(Self.check([Self.c2s(Self.hello), Self.s2c(.control(.goAway(GoAway(code: 3002))))]).isEmpty)
    }

    @Test func theClientsFirstFrameMustBeHelloAndHelloComesOnce() {
        #expect(Self.check([Self.c2s(.control(.ping(Ping(nonce: 1)))), Self.c2s(Self.hello)]) == ["SB-5.1-1"])
        #expect(Self.check([Self.c2s(Self.hello), Self.s2c(Self.welcome([])), Self.c2s(Self.hello)]) == ["SB-5.1-1"])
        #expect(Self.check([Self.c2s(Self.hello), Self.c2s(Self.welcome([]))]) == ["SB-5.1-5"])
    }

    @Test func theServersFirstFrameMustBeWelcomeOrGoAwayAndWelcomeComesOnce() {
        let pong = SwitchboardMessage.control(.pong(Pong(nonce: 1)))
        #expect(Self.check([Self.c2s(Self.hello), Self.s2c(pong), Self.s2c(Self.welcome([]))]) == ["SB-5.1-5"])
        #expect(Self.check([Self.c2s(Self.hello), Self.s2c(Self.welcome([])), Self.s2c(Self.welcome([]))]) == ["SB-5.1-5"])
        #expect(Self.check([Self.c2s(Self.hello), Self.s2c(Self.welcome([])), Self.s2c(Self.hello)]) == ["SB-5.1-5"])
    }

    @Test func compressionNeedsWelcomeAndTheZlibFeature() {
        // Before WELCOME, whatever HELLO offered.
        #expect(Self.check([Self.c2s(Self.hello), Self.c2s(Self.bigRequest, compressed: true)]) == ["SB-5.1-2"])
        // After a WELCOME without zlib, in either direction.
        #expect(Self.check([
            Self.c2s(Self.hello), Self.s2c(Self.welcome(["other"])), Self.c2s(Self.bigRequest, compressed: true),
        ]) == ["SB-5.2-1"])
        #expect(Self.check([
            Self.c2s(Self.hello), Self.s2c(Self.welcome([])),
            Self.s2c(.push(.serverNotice(ServerNotice(message: String(repeating: "y", count: 100)))), compressed: true),
        ]) == ["SB-5.2-1"])
    }
}
