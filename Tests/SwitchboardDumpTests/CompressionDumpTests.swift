import NIOCore
import SwitchboardDump
import SwitchboardWire
import Testing

@Suite struct CompressionDumpTests {
    static let bigResponse = SwitchboardMessage.response(
        id: 3,
        .getUserMetadata(
            GetUserMetadataResponse(
                majorRevision: 9,
                items: [MetadataItem(key: "Bio", value: String(repeating: "Engineer, pilot, collector. ", count: 80))],
                userId: "Tony")))

    @Test("a compressed frame shows its compressed and inflated body sizes and their ratio")
    func compressedFrameShowsRatio() throws {
        let bytes = Bytes.encode([Self.bigResponse], compressionThreshold: 512)
        let frame = try #require(StreamDumper.dump(bytes).first?.frame)
        #expect(frame.header.flags.contains(.compressed))
        let compression = try #require(frame.compression)
        // The compressed body is the frame minus length field, flags, type and the one-byte request id.
        let lengthFieldSize = Varint.size(UInt64(frame.length))
        #expect(compression.compressedSize == frame.wireSize - lengthFieldSize - 3)
        #expect(compression.inflatedSize == Self.bigResponse.bodySize)
        #expect(compression.ratio < 0.2)
        #expect(frame.message == Self.bigResponse)

        let text = TextRenderer().render(DumpEvent(.frame(frame)))
        #expect(
            text.contains(
                "flags=0x01(COMPRESSED) zlib \(compression.compressedSize)/\(compression.inflatedSize) bytes (ratio 0."),
            "\(text)")

        let json = try JSONValue.parse(JSONLinesRenderer().render(DumpEvent(.frame(frame))))
        #expect(json["compression"]?["compressedBytes"]?.uint64Value == UInt64(compression.compressedSize))
        #expect(json["compression"]?["inflatedBytes"]?.uint64Value == UInt64(compression.inflatedSize))
        #expect(json["flagNames"] == .array([.string("COMPRESSED")]))
        let ratio = try #require(json["compression"]?["ratio"].flatMap { if case .number(let text) = $0 { text } else { nil } })
        #expect(abs((Double(ratio) ?? -1) - compression.ratio) < 0.0005, "ratio \(ratio)")
    }

    @Test("every compressed vector shows a ratio, and a frame sent plain shows none",
          arguments: Vector.load("compressed.json"))
    func compressedVectorsShowRatio(vector: Vector) throws {
        let frame = try #require(StreamDumper.dump(Bytes.fromHex(vector.hex), limits: vector.limits).first?.frame)
        let compression = try #require(frame.compression)
        #expect(compression.inflatedSize == frame.message?.bodySize)
        #expect(compression.compressedSize > 0)

        let message = try #require(frame.message)
        let plain = try #require(StreamDumper.dump(Bytes.encode([message])).first?.frame)
        #expect(plain.compression == nil)
        #expect(!TextRenderer().render(DumpEvent(.frame(plain))).contains("zlib"))
    }
}
