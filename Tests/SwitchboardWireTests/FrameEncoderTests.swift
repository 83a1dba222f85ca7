import NIOCore
import SwitchboardWire
import Testing

/// The encoder's ways of framing a body written elsewhere agree with framing the typed message.
@Suite struct FrameEncoderTests {
    /// A 100-record batch answer: large enough to be compressed when compression is on.
    private static let answer = SwitchboardMessage.response(
        id: 300,
        .getUserInfo(
            GetUserInfoResponse(
                users: (0..<100).map { UserInfo(userId: "user-\($0)", name: "Name \($0)", portraitUri: "https://example.com/\($0).png") },
                missing: ["gone"])))

    @Test(arguments: [nil, FrameEncoder.defaultCompressionThreshold])
    func aBodyWrittenInPlaceIsFramedAsTheTypedMessageIs(compressionThreshold: Int?) throws {
        let encoder = FrameEncoder(compressionThreshold: compressionThreshold)
        var typed = ByteBuffer()
        encoder.encode(Self.answer, into: &typed)
        var body = ByteBuffer()
        Self.answer.encodeBody(into: &body)

        var inPlace = ByteBuffer(bytes: [0xAA])  // something already in the output stays in front
        let written = encoder.encode(header: Self.answer.header, bodySize: body.readableBytes, into: &inPlace) { writer in
            body.withUnsafeReadableBytes { writer.writeBytes($0) }
        }
        #expect(inPlace.readInteger(as: UInt8.self) == 0xAA)
        #expect(written == inPlace.readableBytes)
        #expect(inPlace == typed)
        var fromBuffer = ByteBuffer()
        encoder.encode(header: Self.answer.header, body: body, into: &fromBuffer)
        #expect(fromBuffer == typed)
        var decoder = FrameDecoder(direction: .serverToClient)
        let frame = try #require(try decoder.decodeFrame(from: &inPlace))
        #expect(try SwitchboardMessage.decode(frame) == Self.answer)
        #expect(frame.header.flags.contains(.compressed) == (compressionThreshold != nil))
    }
}
