import NIOCore
import SwitchboardRedis
import SwitchboardTestSupport
import Testing

/// The RESP decoder (``RESPToken`` on ``RESPFraming``) and the command encoder, on their own.
@Suite struct RESPTokenTests {
    /// Every type of RESP2 and RESP3, as it arrives and as it reads.
    static let everyType: [(wire: String, model: RESPModel)] = [
        ("+OK\r\n", .simpleString("OK")),
        ("-WRONGTYPE Operation against a key\r\n", .simpleError("WRONGTYPE Operation against a key")),
        (":-42\r\n", .number(-42)),
        (":9223372036854775807\r\n", .number(.max)),
        (":-9223372036854775808\r\n", .number(.min)),
        ("$5\r\nhe\r\no\r\n", .bulkString(Array("he\r\no".utf8))),
        ("$0\r\n\r\n", .bulkString([])),
        ("$-1\r\n", .null),
        ("*-1\r\n", .null),
        ("*0\r\n", .array([])),
        ("_\r\n", .null),
        ("#t\r\n", .boolean(true)),
        ("#f\r\n", .boolean(false)),
        (",1.5\r\n", .double(1.5)),
        (",-inf\r\n", .double(-.infinity)),
        (",10\r\n", .double(10)),
        ("(3492890328409238509324850943850943825024385\r\n", .bigNumber("3492890328409238509324850943850943825024385")),
        ("!21\r\nSYNTAX invalid syntax\r\n", .bulkError(Array("SYNTAX invalid syntax".utf8))),
        ("=15\r\ntxt:Some string\r\n", .verbatimString(Array("txt".utf8), Array("Some string".utf8))),
        ("%1\r\n+key\r\n:1\r\n", .map([.simpleString("key"), .number(1)])),
        ("~2\r\n:1\r\n:2\r\n", .set([.number(1), .number(2)])),
        ("|1\r\n+ttl\r\n:3600\r\n", .attribute([.simpleString("ttl"), .number(3600)])),
        (
            ">3\r\n$7\r\nmessage\r\n$4\r\nroom\r\n$2\r\nhi\r\n",
            .push([.bulkString(Array("message".utf8)), .bulkString(Array("room".utf8)), .bulkString(Array("hi".utf8))])
        ),
        (
            "*3\r\n$7\r\nmessage\r\n$4\r\nroom\r\n*2\r\n:1\r\n+x\r\n",
            .array([.bulkString(Array("message".utf8)), .bulkString(Array("room".utf8)), .array([.number(1), .simpleString("x")])])
        ),
    ]

    @Test("every RESP2 and RESP3 type decodes to its value, one after another, and its token keeps exactly its bytes")
    func everyTypeDecodes() throws {
        var buffer = ByteBuffer(string: Self.everyType.map { $0.wire }.joined())
        for (wire, model) in Self.everyType {
            let token = try #require(try RESPToken(consuming: &buffer), "\(wire.debugDescription)")
            #expect(RESPModel(token) == model, "\(wire.debugDescription)")
            #expect(String(buffer: token.base) == wire)
        }
        #expect(buffer.readableBytes == 0)
        #expect(try RESPToken(consuming: &buffer) == nil)
        var nan = ByteBuffer(string: ",nan\r\n")
        guard case .double(let value) = try #require(try RESPToken(consuming: &nan)).value else {
            Issue.record("not a double")
            return
        }
        #expect(value.isNaN)
    }

    @Test("the accessors read replies as the cluster uses them: text, integers, bytes, elements, null and errors")
    func accessorsReadReplies() throws {
        func token(_ wire: String) throws -> RESPToken {
            var buffer = ByteBuffer(string: wire)
            return try #require(try RESPToken(consuming: &buffer))
        }
        #expect(try token("+OK\r\n").string == "OK")
        #expect(try token("$3\r\n-12\r\n").string == "-12")
        #expect(try token("$3\r\n-12\r\n").integer == -12)
        #expect(try token(":7\r\n").string == "7")
        #expect(try token(":7\r\n").integer == 7)
        #expect(try token("=9\r\ntxt:hello\r\n").string == "hello")
        #expect(try token("$2\r\n\r\n\r\n").bytes == ByteBuffer(string: "\r\n"))
        #expect(try token("+OK\r\n").bytes == nil)
        #expect(try token("*2\r\n:1\r\n$1\r\na\r\n").array?.map(\.string) == ["1", "a"])
        #expect(try token("~1\r\n:1\r\n").array?.count == 1)
        #expect(try token("*-1\r\n").array == nil)
        #expect(try token("*-1\r\n").isNull && token("$-1\r\n").isNull && token("_\r\n").isNull)
        #expect(try !token("$0\r\n\r\n").isNull && !token("*0\r\n").isNull)
        #expect(try token("-ERR no\r\n").errorMessage == "ERR no")
        #expect(try token("!6\r\nERR no\r\n").errorMessage == "ERR no")
        #expect(try token("+ERR no\r\n").errorMessage == nil)
        #expect(try token("*1\r\n+a\r\n").type == .array)
        #expect(try token("$1\r\n\r\r\n").description == "$1\\r\\n\\r\\r\\n")
    }

    @Test("a value cut at every byte is not decoded, and nothing consumed, until its last byte arrives")
    func partialInputWaits() throws {
        let wire = Array(Self.everyType.map { $0.wire }.joined().utf8)
        for cut in 0..<wire.count {
            var buffer = ByteBuffer(bytes: wire[..<cut])
            var decoded: [RESPModel] = []
            while let token = try RESPToken(consuming: &buffer) { decoded.append(RESPModel(token)) }
            let consumed = cut - buffer.readableBytes
            #expect(decoded == Self.everyType.prefix(decoded.count).map { $0.model }, "cut at \(cut)")
            #expect(consumed == Self.everyType.prefix(decoded.count).map { $0.wire.utf8.count }.reduce(0, +), "cut at \(cut)")
            buffer.writeBytes(wire[cut...])
            while let token = try RESPToken(consuming: &buffer) { decoded.append(RESPModel(token)) }
            #expect(decoded == Self.everyType.map { $0.model }, "cut at \(cut)")
        }
    }

    @Test("nested aggregates decode to the depth limit and are refused one level beyond it")
    func nestingIsBounded() throws {
        let limit = RESPLimits.default.maximumDepth
        func nested(_ levels: Int) -> String { String(repeating: "*1\r\n", count: levels) + ":1\r\n" }
        var deepest = ByteBuffer(string: nested(limit))
        var model = try RESPModel(#require(try RESPToken(consuming: &deepest)))
        for _ in 0..<limit {
            guard case .array(let elements) = model, elements.count == 1 else {
                Issue.record("not an array of one: \(model)")
                return
            }
            model = elements[0]
        }
        #expect(model == .number(1))
        var tooDeep = ByteBuffer(string: nested(limit + 1))
        #expect(throws: RESPDecodingError(.tooDeep, at: 4 * limit)) { try RESPToken(consuming: &tooDeep) }
        // Mixed aggregates count alike, and the limit holds before the value is whole.
        var mixed = ByteBuffer(string: String(repeating: "%1\r\n+k\r\n>1\r\n", count: limit / 2 + 1))
        #expect(throws: RESPDecodingError.self) { try RESPToken(consuming: &mixed) }
        var custom = ByteBuffer(string: nested(3))
        let shallow = RESPLimits(maximumDepth: 2, maximumBlobLength: 10, maximumElements: 10, maximumLineLength: 10)
        #expect(throws: RESPDecodingError(.tooDeep, at: 8)) { try RESPToken(consuming: &custom, limits: shallow) }
    }

    @Test("malformed input is refused with its code and offset, not waited on or guessed at")
    func malformedInputIsRefused() {
        let cases: [(String, RESPDecodingError)] = [
            ("?x\r\n", RESPDecodingError(.unknownType, at: 0)),
            ("+OK\rX", RESPDecodingError(.bareCarriageReturn, at: 3)),
            (":12a\r\n", RESPDecodingError(.badNumber, at: 1)),
            (":\r\n", RESPDecodingError(.badNumber, at: 1)),
            (":99999999999999999999\r\n", RESPDecodingError(.badNumber, at: 1)),
            ("$-2\r\n", RESPDecodingError(.badLength, at: 1)),
            ("!-1\r\n", RESPDecodingError(.badLength, at: 1)),
            ("$x\r\n", RESPDecodingError(.badNumber, at: 1)),
            ("$3\r\nabcXY", RESPDecodingError(.missingTerminator, at: 7)),
            ("*-5\r\n", RESPDecodingError(.badCount, at: 1)),
            ("%-1\r\n", RESPDecodingError(.badCount, at: 1)),
            ("*2\r\n:1\r\n?\r\n", RESPDecodingError(.unknownType, at: 8)),
            ("#x\r\n", RESPDecodingError(.badScalar, at: 1)),
            ("#tt\r\n", RESPDecodingError(.badScalar, at: 1)),
            ("_x\r\n", RESPDecodingError(.badScalar, at: 1)),
            (",1.2.3\r\n", RESPDecodingError(.badScalar, at: 1)),
            (",\r\n", RESPDecodingError(.badScalar, at: 1)),
            ("(12a\r\n", RESPDecodingError(.badScalar, at: 1)),
            ("(-\r\n", RESPDecodingError(.badScalar, at: 1)),
            ("=3\r\ntxt\r\n", RESPDecodingError(.badScalar, at: 4)),
            ("=5\r\ntxt-a\r\n", RESPDecodingError(.badScalar, at: 4)),
            ("=0\r\n\r\n", RESPDecodingError(.badScalar, at: 4)),
            ("=2\r\nab\r\n:1\r\n", RESPDecodingError(.badScalar, at: 4)),
        ]
        for (wire, error) in cases {
            var buffer = ByteBuffer(string: wire)
            #expect(throws: error, "\(wire.debugDescription)") { try RESPToken(consuming: &buffer) }
            #expect(buffer.readableBytes == wire.utf8.count)
        }
    }

    @Test("sizes beyond the limits are refused as soon as they are announced: blobs, counts and unended lines")
    func sizesAreBounded() throws {
        let limits = RESPLimits(maximumDepth: 4, maximumBlobLength: 8, maximumElements: 6, maximumLineLength: 20)
        func decode(_ wire: String) throws -> RESPModel? {
            var buffer = ByteBuffer(string: wire)
            return try RESPToken(consuming: &buffer, limits: limits).map(RESPModel.init)
        }
        #expect(try decode("$8\r\n12345678\r\n") == .bulkString(Array("12345678".utf8)))
        #expect(throws: RESPDecodingError(.badLength, at: 1)) { try decode("$9\r\n") }
        #expect(throws: RESPDecodingError(.badLength, at: 1)) { try decode("=9\r\n") }
        #expect(throws: RESPDecodingError(.badLength, at: 1)) { try decode("$9223372036854775807\r\n") }
        #expect(try decode("*6\r\n") == nil)
        #expect(throws: RESPDecodingError(.badCount, at: 1)) { try decode("*7\r\n") }
        #expect(try decode("%3\r\n") == nil)
        #expect(throws: RESPDecodingError(.badCount, at: 1)) { try decode("%4\r\n") }
        #expect(throws: RESPDecodingError(.badCount, at: 1)) { try decode("%9223372036854775807\r\n") }
        // A line of exactly the limit is waited for; one byte more is refused without its CRLF ever coming.
        #expect(try decode("+" + String(repeating: "a", count: 20)) == nil)
        #expect(try decode("+" + String(repeating: "a", count: 20) + "\r\n") == .simpleString(String(repeating: "a", count: 20)))
        #expect(throws: RESPDecodingError(.lineTooLong, at: 0)) { try decode("+" + String(repeating: "a", count: 21)) }
        #expect(throws: RESPDecodingError(.lineTooLong, at: 4)) { try decode("*1\r\n-" + String(repeating: "e", count: 40)) }
        // The default limits: Redis's 512 MB bulk strings.
        var huge = ByteBuffer(string: "$\(512 << 20)\r\n")
        #expect(try RESPToken(consuming: &huge) == nil)
        var tooHuge = ByteBuffer(string: "$\((512 << 20) + 1)\r\n")
        #expect(throws: RESPDecodingError(.badLength, at: 1)) { try RESPToken(consuming: &tooHuge) }
    }

    @Test("fuzz: random values of every type, encoded and fed in random chunks, decode to themselves")
    func randomValuesRoundTrip() throws {
        var generator = SplitMix64(seed: 0x5B_2029)
        for round in 0..<300 {
            let values = (0..<Int.random(in: 1...6, using: &generator)).map { _ in RESPModel.random(depth: 4, using: &generator) }
            let wire = values.flatMap(\.encoded)
            var pending = ByteBuffer()
            var decoded: [RESPModel] = []
            var offset = 0
            while offset < wire.count {
                let size = Int.random(in: 1...9, using: &generator)
                pending.writeBytes(wire[offset..<min(offset + size, wire.count)])
                offset += size
                while let token = try RESPToken(consuming: &pending) {
                    decoded.append(RESPModel(token))
                    #expect(token.base.readableBytesView.elementsEqual(RESPModel(token).encoded), "round \(round)")
                }
            }
            #expect(decoded == values, "round \(round)")
            #expect(pending.readableBytes == 0, "round \(round)")
        }
    }

    @Test("fuzz: damaged encodings never trap; what decodes reads back whole, what does not waits or is refused")
    func damagedInputNeverTraps() throws {
        var generator = SplitMix64(seed: 0xBAD_2029)
        for _ in 0..<2_000 {
            var wire = RESPModel.random(depth: 3, using: &generator).encoded
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                let index = Int.random(in: 0..<wire.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: wire[index] = UInt8.random(in: 0...255, using: &generator)
                case 1: wire.remove(at: index)
                default: wire.insert(Array("\r\n:$*-0123456789".utf8).randomElement(using: &generator)!, at: index)
                }
                if wire.isEmpty { wire = [0x2B] }
            }
            var buffer = ByteBuffer(bytes: wire)
            while let token = try? RESPToken(consuming: &buffer) {
                // Reading the token walks every element (it must not trap); what it read encodes and decodes again.
                let model = RESPModel(token)
                var again = ByteBuffer(bytes: model.encoded)
                #expect(try RESPToken(consuming: &again).map { RESPModel($0).encoded } == model.encoded, "\(model)")
            }
        }
    }

    @Test("fuzz: commands of random arguments encode to arrays of bulk strings that decode to the same arguments")
    func commandsRoundTrip() throws {
        var generator = SplitMix64(seed: 0xC0_2029)
        for _ in 0..<500 {
            let arguments: [RESPArgument] = (0..<Int.random(in: 1...6, using: &generator)).map { _ in
                let bytes = (0..<Int.random(in: 0...20, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
                return Bool.random(using: &generator)
                    ? .bytes(ByteBuffer(bytes: bytes)) : .string(String(decoding: bytes.filter { $0 < 0x80 }, as: UTF8.self))
            }
            var buffer = ByteBuffer()
            buffer.writeRESPCommand(arguments)
            let token = try #require(try RESPToken(consuming: &buffer))
            #expect(buffer.readableBytes == 0)
            let decoded = try #require(token.array).map { $0.bytes }
            #expect(decoded == arguments.map { argument -> ByteBuffer? in
                switch argument {
                case .string(let text): return ByteBuffer(string: text)
                case .bytes(let bytes): return bytes
                }
            })
        }
        var text = ByteBuffer()
        text.writeRESPCommand(["PUBLISH", "ch", "7 99"] as [String])
        #expect(String(buffer: text) == "*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n$4\r\n7 99\r\n")
    }
}
