import NIOCore
import NIOPosix
import SwitchboardRedis
import SwitchboardTestSupport
import Synchronization
import Testing

/// The shared Redis client against a real `redis-server` of the test's own.
@Suite("Redis connection", .serialized, .timeLimit(.minutes(2)))
struct RedisConnectionTests {
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
        // An error reply inside a pipeline is that command's reply; the others are answered.
        let mixed = try await connection.pipeline([["INCR", "hash"], ["HGET", "hash", "field"]])
        #expect(mixed[0].errorMessage?.hasPrefix("WRONGTYPE") == true && mixed[1].string == "value")
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

        // A command made when it is written (sbbench stamps its PUBLISH so) is answered in its turn.
        let stamped = Atomic<Int>(0)
        let made = connection.send(madeAtWrite: {
            stamped.store(1, ordering: .relaxed)
            return ["INCR", "counter"]
        })
        #expect(try await made.get().integer == 1_001)
        #expect(stamped.load(ordering: .relaxed) == 1)
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

    @Test("a reply beyond the connection's limits closes it and fails the command, instead of being waited for")
    func repliesBeyondTheLimitsCloseTheConnection() async throws {
        let redis = try await TestRedis.start()
        let limits = RESPLimits(maximumDepth: 4, maximumBlobLength: 16, maximumElements: 8, maximumLineLength: 64)
        let connection = try await RedisConnection.connect(host: "127.0.0.1", port: redis.port, limits: limits)
        try await connection.command("SET", "small", "0123456789abcdef")
        try await connection.command("SET", "big", "0123456789abcdefX")
        #expect(try await connection.command("GET", "small").string == "0123456789abcdef")
        await #expect(throws: RESPDecodingError(.badLength, at: 1)) { try await connection.command("GET", "big") }
        let deadline = ContinuousClock.now + .seconds(5)
        while !connection.isClosed, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(connection.isClosed)
        await connection.close()
        await redis.stop()
    }

    @Test("a command that gets no reply within the command timeout closes the connection and fails")
    func commandTimeoutClosesTheConnection() async throws {
        let redis = try await TestRedis.start()
        let connection = try await RedisConnection.connect(
            host: "127.0.0.1", port: redis.port, commandTimeout: .milliseconds(300))
        let start = ContinuousClock.now
        await #expect(throws: RedisConnection.Closed.self) { try await connection.command("BLPOP", "nothing", "0") }
        let waited = ContinuousClock.now - start
        #expect(waited >= .milliseconds(250) && waited < .seconds(3), "\(waited)")
        #expect(connection.isClosed)
        await redis.stop()
    }
}
