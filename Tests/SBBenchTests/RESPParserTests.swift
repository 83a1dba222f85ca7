import NIOCore
import Testing

@testable import sbbench

/// The RESP2 reader and writer behind redis-fanout.
@Suite struct RESPParserTests {
    @Test("a subscribed connection's message push parses into channel and payload")
    func parsesMessagePush() throws {
        var buffer = ByteBuffer(string: "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$7\r\n12 3456\r\n")
        let value = try RESPParser.parse(from: &buffer)
        #expect(value == .array([.bulkString(ByteBuffer(string: "message")), .bulkString(ByteBuffer(string: "ch")),
                                 .bulkString(ByteBuffer(string: "12 3456"))]))
        #expect(buffer.readableBytes == 0)
    }

    @Test("integers, simple strings, errors and nulls parse")
    func parsesScalars() throws {
        var buffer = ByteBuffer(string: ":5000\r\n+OK\r\n-ERR wrong type\r\n$-1\r\n*-1\r\n$0\r\n\r\n")
        #expect(try RESPParser.parse(from: &buffer) == .integer(5000))
        #expect(try RESPParser.parse(from: &buffer) == .simpleString("OK"))
        #expect(try RESPParser.parse(from: &buffer) == .error("ERR wrong type"))
        #expect(try RESPParser.parse(from: &buffer) == .bulkString(nil))
        #expect(try RESPParser.parse(from: &buffer) == .array(nil))
        #expect(try RESPParser.parse(from: &buffer) == .bulkString(ByteBuffer()))
        #expect(try RESPParser.parse(from: &buffer) == nil)
    }

    @Test("a value split at every byte boundary parses only once it is whole, consuming nothing before")
    func waitsForWholeValue() throws {
        let wire = Array("*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n".utf8)
        for cut in 0..<wire.count {
            var buffer = ByteBuffer(bytes: wire[..<cut])
            #expect(try RESPParser.parse(from: &buffer) == nil, "cut at \(cut)")
            #expect(buffer.readableBytes == cut)
            buffer.writeBytes(wire[cut...])
            let value = try RESPParser.parse(from: &buffer)
            #expect(value?.string == nil)
            guard case .array(let elements?) = value else {
                Issue.record("not an array after the cut at \(cut)")
                continue
            }
            #expect(elements.map(\.string) == ["subscribe", "ch", nil])
            #expect(elements.last == .integer(1))
        }
    }

    @Test("garbage is an error, not a value or a wait")
    func rejectsGarbage() {
        var unknownType = ByteBuffer(string: "?x\r\n")
        #expect(throws: RESPParseError.self) { try RESPParser.parse(from: &unknownType) }
        var badInteger = ByteBuffer(string: ":12a\r\n")
        #expect(throws: RESPParseError.self) { try RESPParser.parse(from: &badInteger) }
        var badTerminator = ByteBuffer(string: "$2\r\nabXY")
        #expect(throws: RESPParseError.self) { try RESPParser.parse(from: &badTerminator) }
        var bareCR = ByteBuffer(string: "+OK\rX")
        #expect(throws: RESPParseError.self) { try RESPParser.parse(from: &bareCR) }
    }

    @Test("a command is written as an array of bulk strings")
    func encodesCommand() {
        var buffer = ByteBuffer()
        RESPEncoder.encodeCommand(["PUBLISH", "ch", "7 99"], into: &buffer)
        #expect(String(buffer: buffer) == "*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n$4\r\n7 99\r\n")
    }
}
