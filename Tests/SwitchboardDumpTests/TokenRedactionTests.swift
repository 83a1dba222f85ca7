import NIOCore
import SwitchboardDump
import SwitchboardWire
import Testing

@Suite struct TokenRedactionTests {
    static let token = "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0"  // 33 bytes

    /// HELLO with a token, a renewToken request, and HELLO without a token, as one client-to-server stream.
    static let stream: ByteBuffer = {
        var bytes = ByteBuffer()
        let encoder = FrameEncoder()
        encoder.encode(.control(.hello(Hello(protocolVersion: 1, token: Self.token, userId: "Tony"))), into: &bytes)
        encoder.encode(.request(id: 1, .renewToken(RenewTokenRequest(token: Self.token + "x"))), into: &bytes)
        encoder.encode(.control(.hello(Hello(protocolVersion: 1, userId: "Ann"))), into: &bytes)
        return bytes
    }()

    static func lines(_ renderer: any DumpRenderer) -> [String] {
        StreamDumper.dump(Self.stream, direction: .clientToServer).map(renderer.render)
    }

    @Test("by default HELLO's and renewToken's tokens print as <redacted N bytes>, in text and JSON")
    func tokensAreRedactedByDefault() throws {
        for renderer in [DumpFormat.text.renderer(), DumpFormat.jsonLines.renderer()] {
            let lines = Self.lines(renderer)
            #expect(lines.count == 3)
            #expect(!lines.contains { $0.contains(Self.token) }, "\(lines)")
            #expect(lines[0].contains("<redacted 33 bytes>"), "\(lines[0])")
            #expect(lines[1].contains("<redacted 34 bytes>"), "\(lines[1])")
            #expect(!lines[2].contains("redacted"), "an empty token is not a secret: \(lines[2])")
        }
        let json = try JSONValue.parse(Self.lines(JSONLinesRenderer())[0])
        #expect(json["message"]?["body"]?["token"] == .string("<redacted 33 bytes>"))
        #expect(json["message"]?["body"]?["userId"] == .string("Tony"), "only the token is replaced")
    }

    @Test("with showsTokens the tokens print as they are")
    func tokensAreShownWhenAskedFor() throws {
        for renderer in [DumpFormat.text.renderer(showsTokens: true), DumpFormat.jsonLines.renderer(showsTokens: true)] {
            let lines = Self.lines(renderer)
            #expect(lines[0].contains(Self.token), "\(lines[0])")
            #expect(lines[1].contains(Self.token + "x"), "\(lines[1])")
            #expect(!lines.contains { $0.contains("redacted") })
        }
    }

    @Test("redaction changes only the token: other messages come back unchanged")
    func redactionTouchesOnlyTokens() {
        let get = SwitchboardMessage.request(id: 7, .getUserMetadata(GetUserMetadataRequest(userId: "eyJ.not-a-token")))
        #expect(TokenRedaction.redacted(get) == get)
        let hello = SwitchboardMessage.control(.hello(Hello(protocolVersion: 1, token: "abc", userId: "Tony", deviceId: "d")))
        #expect(
            TokenRedaction.redacted(hello)
                == .control(.hello(Hello(protocolVersion: 1, token: "<redacted 3 bytes>", userId: "Tony", deviceId: "d"))))
    }
}
