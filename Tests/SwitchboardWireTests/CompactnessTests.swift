import NIOCore
import SwitchboardWire
import Testing

/// The size targets of the wire format (issue 2): a one-item user-metadata set within 24 bytes, its success response
/// within 8, at most 5 bytes of header on a small frame.
@Suite struct CompactnessTests {
    @Test func oneItemUserMetadataSetIsAtMost24Bytes() throws {
        let request = SwitchboardMessage.request(
            id: 1, .setUserMetadata(SetUserMetadataRequest(userId: "Tony", items: [MetadataItem(key: "Name", value: "Tony")])))
        let bytes = Codec.encode(request)
        #expect(bytes.readableBytes <= 24)
        #expect(Codec.hex(bytes) == "17004c01" + "0a04546f6e79" + "120c" + "0a044e616d65" + "1204546f6e79")
        #expect(try Codec.decodeAll(bytes) == [request])
    }

    @Test func successResponseIsAtMost8Bytes() throws {
        let response = SwitchboardMessage.response(id: 1, .setUserMetadata(SetUserMetadataResponse(majorRevision: 1)))
        let bytes = Codec.encode(response)
        #expect(bytes.readableBytes <= 8)
        #expect(Codec.hex(bytes) == "05008c010801")
        // It stays within 8 bytes until the set's revision passes 2^21 (three varint bytes).
        let large = SwitchboardMessage.response(id: 1, .setUserMetadata(SetUserMetadataResponse(majorRevision: 2_097_151)))
        #expect(Codec.encode(large).readableBytes <= 8)
    }

    @Test(arguments: [1, 127, 128, 16_383])
    func smallFrameHeaderIsAtMost5Bytes(requestID: UInt32) {
        let message = SwitchboardMessage.request(id: requestID, .getUserMetadata(GetUserMetadataRequest(userId: "Tony")))
        let header = message.header
        let length = header.encodedSize + message.bodySize
        #expect(Varint.size(UInt64(length)) + header.encodedSize <= 5)
    }
}
