import NIOCore
@testable import SwitchboardCluster
import SwitchboardTestSupport
import Synchronization
import Testing

/// The hand-written RESP2 client: the reply grammar on its own, then against a real `redis-server` of the test's own.
@Suite("Redis connection", .serialized, .timeLimit(.minutes(2)))
struct RedisConnectionTests {
    static let replies: [(String, RESPValue)] = [
        ("+OK\r\n", .simpleString("OK")),
        ("-WRONGTYPE Operation against a key\r\n", .error("WRONGTYPE Operation against a key")),
        (":-42\r\n", .integer(-42)),
        ("$5\r\nhe\r\no\r\n", .bulkString(ByteBuffer(string: "he\r\no"))),
        ("$0\r\n\r\n", .bulkString(ByteBuffer())),
        ("$-1\r\n", .bulkString(nil)),
        ("*-1\r\n", .array(nil)),
        ("*0\r\n", .array([])),
        (
            "*3\r\n$7\r\nmessage\r\n$4\r\nroom\r\n*2\r\n:1\r\n+x\r\n",
            .array([
                .bulkString(ByteBuffer(string: "message")), .bulkString(ByteBuffer(string: "room")),
                .array([.integer(1), .simpleString("x")]),
            ])
        ),
    ]

    @Test("every reply type parses, whatever the chunks it arrives in")
    func repliesParseAcrossEveryChunking() throws {
        let stream = Self.replies.map(\.0).joined()
        let expected = Self.replies.map(\.1)
        let bytes = Array(stream.utf8)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            var pending = ByteBuffer()
            var parsed: [RESPValue] = []
            var offset = 0
            while offset < bytes.count {
                let size = Int.random(in: 1...7, using: &generator)
                pending.writeBytes(bytes[offset..<min(offset + size, bytes.count)])
                offset += size
                while let value = try RESPParser.read(from: &pending) { parsed.append(value) }
            }
            #expect(parsed == expected)
            #expect(pending.readableBytes == 0)
        }
    }

    @Test("a malformed reply is refused instead of being guessed at")
    func malformedRepliesAreRefused() {
        for bad in ["?x\r\n", ":12a\r\n", "$-2\r\n", "$3\r\nabcXY", "*-5\r\n", String(repeating: "*1\r\n", count: 40) + ":1\r\n"] {
            var buffer = ByteBuffer(string: bad)
            #expect(throws: RESPProtocolError.self, "\(bad.debugDescription)") { _ = try RESPParser.read(from: &buffer) }
        }
    }

    @Test("commands round-trip binary values, pipeline in order and report error replies")
    func commandsAgainstARealServer() async throws {
        let redis = try await TestRedis.start()
        let connection = try await RedisConnection.connect(host: "127.0.0.1", port: redis.port)
        var binary = ByteBuffer()
        binary.writeBytes([0, 0xFF, 0x0D, 0x0A, 0x80, 0x41])
        try await connection.command("SET", "key", .bytes(binary))
        #expect(try await connection.command("GET", "key").bytes == binary)
        #expect(try await connection.command("GET", "missing").isNull)

        let replies = try await connection.pipeline((0..<1_000).map { _ in ["INCR", "counter"] })
        #expect(replies.map(\.integer) == (1...1_000).map { Int64($0) })

        try await connection.command("HSET", "hash", "field", "value")
        await #expect(throws: RedisConnection.ErrorReply.self) { try await connection.command("INCR", "hash") }
        // The connection goes on after an error reply.
        #expect(try await connection.command("HGET", "hash", "field").string == "value")

        // Concurrent callers share the connection; each gets its own reply.
        let results = await withTaskGroup(of: Bool.self) { group in
            for index in 0..<50 {
                group.addTask {
                    let reply = try? await connection.command("ECHO", .string("caller\(index)"))
                    return reply?.string == "caller\(index)"
                }
            }
            var all = true
            for await ok in group { all = all && ok }
            return all
        }
        #expect(results)
        await connection.close()
        await redis.stop()
    }

    @Test("a subscriber gets published messages in order, and waiting commands fail when the server dies")
    func publishSubscribeAndServerDeath() async throws {
        let redis = try await TestRedis.start()
        let received = Mutex<[String]>([])
        let subscriber = try await RedisConnection.connect(host: "127.0.0.1", port: redis.port) { message in
            received.withLock { $0.append("\(message.channel):\(String(buffer: message.payload))") }
        }
        try await subscriber.subscribe(["a", "b"])
        let publisher = try await RedisConnection.connect(host: "127.0.0.1", port: redis.port)
        for index in 0..<100 {
            let delivered = try await publisher.command("PUBLISH", index % 2 == 0 ? "a" : "b", .string("m\(index)"))
            #expect(delivered.integer == 1)
        }
        let deadline = ContinuousClock.now + .seconds(5)
        while received.withLock({ $0.count }) < 100, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(received.withLock { $0 } == (0..<100).map { "\($0 % 2 == 0 ? "a" : "b"):m\($0)" })
        try await subscriber.unsubscribe(["b"])
        #expect(try await publisher.command("PUBLISH", "b", "after").integer == 0)

        // A command the dead server never answers fails instead of hanging.
        let blocked = Task { try await publisher.command("BLPOP", "nothing", "0") }
        try await Task.sleep(for: .milliseconds(100))
        redis.server.killAndWait()
        await #expect(throws: RedisConnection.Closed.self) { try await blocked.value }
        _ = try? await subscriber.closeFuture.get()
        #expect(subscriber.isClosed && publisher.isClosed)
        await redis.stop()
    }
}
