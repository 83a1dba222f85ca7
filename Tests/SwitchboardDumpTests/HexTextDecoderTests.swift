import NIOCore
import SwitchboardDump
import Testing

@Suite struct HexTextDecoderTests {
    @Test("white space, newlines, either case and # comments are ignored")
    func ignoresLayoutAndComments() throws {
        let text = """
            # PING with nonce 42
            04 00\t03   # length, flags, type
            08 2A
            # trailing comment without newline
            """
        let bytes = try HexTextDecoder.bytes(fromHex: text)
        #expect(Array(bytes.readableBytesView) == [0x04, 0x00, 0x03, 0x08, 0x2A])
    }

    @Test("the two digits of a byte may be split across chunks and by white space")
    func digitsSplitAcrossChunks() throws {
        var decoder = HexTextDecoder()
        var output = ByteBuffer()
        for chunk in ["0", "4 0", "0\n0", "3# c", "omment\n", "08", "2a"] {
            try decoder.decode(chunk.utf8, into: &output)
        }
        try decoder.finish()
        #expect(Array(output.readableBytesView) == [0x04, 0x00, 0x03, 0x08, 0x2A])
    }

    @Test("a character that is not hex is reported with its line and column")
    func reportsBadCharacterPosition() {
        #expect(throws: HexTextError(line: 2, column: 4, reason: .unexpectedCharacter(UInt8(ascii: "g")))) {
            _ = try HexTextDecoder.bytes(fromHex: "0400\n03 g8")
        }
    }

    @Test("text ending in the middle of a byte is an error")
    func reportsOddDigitCount() {
        #expect(throws: HexTextError(line: 1, column: 5, reason: .oddDigitCount)) {
            _ = try HexTextDecoder.bytes(fromHex: "04000")
        }
    }

    @Test("the error text says what and where")
    func errorDescriptionNamesThePlace() {
        let error = HexTextError(line: 3, column: 7, reason: .unexpectedCharacter(UInt8(ascii: "z")))
        #expect(error.description == "hex input line 3, column 7: 'z' is not a hex digit")
    }
}
