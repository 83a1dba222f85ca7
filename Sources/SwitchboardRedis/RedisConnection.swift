import NIOCore
import NIOPosix

/// A connection to a Redis server speaking RESP2: commands are written as they come and their replies matched to
/// them in order, so any number of callers may pipeline on one connection. Used by the cluster (presence, the change
/// feed relay, the health probe) and by sbbench's `redis-fanout` publisher.
///
/// A connection made with a message handler is a subscriber: after ``subscribe(_:)`` the server pushes
/// `message` arrays, which go to the handler in the order they arrive, and only `(P|S)SUBSCRIBE`-family commands and
/// `PING` may be sent.
public final class RedisConnection: Sendable {
    /// A message published to a channel this connection subscribed to.
    public struct Message: Sendable, Hashable {
        /// The channel.
        public var channel: String
        /// What was published.
        public var payload: ByteBuffer
    }

    /// The server answered a command with an error reply (`-ERR ...`); the connection stays usable.
    public struct ErrorReply: Error, Hashable, CustomStringConvertible {
        /// The server's message, its error kind first (`ERR`, `WRONGTYPE`, ...).
        public var message: String
        public var description: String { "Redis error: \(self.message)" }

        public init(message: String) {
            self.message = message
        }
    }

    /// The connection closed before the reply arrived.
    public struct Closed: Error, CustomStringConvertible {
        public var description: String { "the Redis connection closed" }
    }

    private let channel: any Channel
    /// How long a command may wait for its reply before the connection is closed (which fails every command waiting
    /// on it): a server that stopped answering costs an error, not a caller waiting for good.
    private let commandTimeout: TimeAmount?

    private init(channel: any Channel, commandTimeout: TimeAmount?) {
        self.channel = channel
        self.commandTimeout = commandTimeout
    }

    /// Connects to `host:port`.
    ///
    /// - Parameters:
    ///   - eventLoopGroup: Where the connection runs (an `EventLoop` picks that loop).
    ///   - connectTimeout: How long connecting may take.
    ///   - commandTimeout: How long a command may wait for its reply; then the connection closes and every waiting
    ///     command fails with ``Closed`` (nil: no bound).
    ///   - limits: What a reply may hold before it is taken for garbage (the connection then closes).
    ///   - onMessage: Makes the connection a subscriber: receives every published message, on the connection's
    ///     event loop (it must not block).
    public static func connect(
        host: String, port: Int, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        connectTimeout: TimeAmount = .seconds(2), commandTimeout: TimeAmount? = .seconds(5), limits: RESPLimits = .default,
        onMessage: (@Sendable (Message) -> Void)? = nil
    ) async throws -> RedisConnection {
        let channel = try await ClientBootstrap(group: eventLoopGroup)
            .connectTimeout(connectTimeout)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(RedisReplyHandler(limits: limits, onMessage: onMessage))
                }
            }
            .connect(host: host, port: port).get()
        return RedisConnection(channel: channel, commandTimeout: commandTimeout)
    }

    /// Whether the connection is closed.
    public var isClosed: Bool { !self.channel.isActive }

    /// Completes when the connection closes.
    public var closeFuture: EventLoopFuture<Void> { self.channel.closeFuture }

    /// The event loop the connection runs on.
    public var eventLoop: any EventLoop { self.channel.eventLoop }

    /// Sends one command and returns its reply, error replies included.
    ///
    /// - Throws: ``Closed`` when the connection closed first.
    public func send(_ arguments: [RESPArgument]) async throws -> RESPToken {
        try await self.pipeline([arguments])[0]
    }

    /// Sends one command; an error reply is thrown.
    ///
    /// - Throws: ``ErrorReply``, or ``Closed``.
    @discardableResult
    public func command(_ arguments: RESPArgument...) async throws -> RESPToken {
        let reply = try await self.send(arguments)
        if let message = reply.errorMessage { throw ErrorReply(message: message) }
        return reply
    }

    /// Sends `commands` in one write and returns their replies in order (error replies included).
    ///
    /// - Throws: ``Closed`` when the connection closed before every reply arrived.
    public func pipeline(_ commands: [[RESPArgument]]) async throws -> [RESPToken] {
        guard !commands.isEmpty else { return [] }
        var bytes = self.channel.allocator.buffer(capacity: 64 * commands.count)
        for command in commands { bytes.writeRESPCommand(command) }
        let promises = self.write(.encoded(bytes), replies: commands.count)
        let watch = self.watch(promises)
        defer { watch?.cancel() }
        var replies: [RESPToken] = []
        replies.reserveCapacity(promises.count)
        for promise in promises { replies.append(try await promise.futureResult.get()) }
        return replies
    }

    /// Sends the command `make` returns when the connection writes it (on its event loop), and returns the reply's
    /// future, error replies included: for a caller that stamps a command with the moment it goes out (sbbench's
    /// publisher). Not bounded by the command timeout.
    public func send(madeAtWrite make: @escaping @Sendable () -> [RESPArgument]) -> EventLoopFuture<RESPToken> {
        self.write(.madeAtWrite(make), replies: 1)[0].futureResult
    }

    /// Subscribes to `channels` (a subscriber connection); returns once the server confirmed each.
    public func subscribe(_ channels: [String]) async throws {
        try await self.subscription("SUBSCRIBE", channels)
    }

    /// Unsubscribes from `channels`; returns once the server confirmed each.
    public func unsubscribe(_ channels: [String]) async throws {
        try await self.subscription("UNSUBSCRIBE", channels)
    }

    private func subscription(_ verb: String, _ channels: [String]) async throws {
        guard !channels.isEmpty else { return }
        var bytes = self.channel.allocator.buffer(capacity: 64)
        bytes.writeRESPCommand([.string(verb)] + channels.map { .string($0) })
        // One confirmation per channel.
        let promises = self.write(.encoded(bytes), replies: channels.count)
        let watch = self.watch(promises)
        defer { watch?.cancel() }
        for promise in promises {
            if let message = try await promise.futureResult.get().errorMessage { throw ErrorReply(message: message) }
        }
    }

    private func write(_ command: RedisRequest.Command, replies: Int) -> [EventLoopPromise<RESPToken>] {
        let promises = (0..<replies).map { _ in self.channel.eventLoop.makePromise(of: RESPToken.self) }
        self.channel.writeAndFlush(RedisRequest(command: command, replies: promises), promise: nil)
        return promises
    }

    /// Closes the connection at ``commandTimeout`` unless every reply in `promises` came first.
    private func watch(_ promises: [EventLoopPromise<RESPToken>]) -> Scheduled<Void>? {
        guard let timeout = self.commandTimeout, let last = promises.last else { return nil }
        let channel = self.channel
        let scheduled = channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        last.futureResult.whenComplete { _ in scheduled.cancel() }
        return scheduled
    }

    /// Closes the connection; waiting commands fail with ``Closed``.
    public func close() async {
        try? await self.channel.close()
    }
}

/// Commands on their way out, with the promises of their replies.
struct RedisRequest: Sendable {
    enum Command: Sendable {
        /// Commands written already.
        case encoded(ByteBuffer)
        /// One command, made when it is written.
        case madeAtWrite(@Sendable () -> [RESPArgument])
    }

    var command: Command
    var replies: [EventLoopPromise<RESPToken>]
}

/// Writes commands and matches replies to them in order; on a subscriber connection, hands pushed messages to the
/// message handler instead. RESP3 attributes (data about the reply that follows) are passed over.
final class RedisReplyHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = RedisRequest
    typealias OutboundOut = ByteBuffer

    private var received: ByteBuffer?
    private var waiting = CircularBuffer<EventLoopPromise<RESPToken>>()
    private let limits: RESPLimits
    private let onMessage: (@Sendable (RedisConnection.Message) -> Void)?

    init(limits: RESPLimits, onMessage: (@Sendable (RedisConnection.Message) -> Void)?) {
        self.limits = limits
        self.onMessage = onMessage
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let request = self.unwrapOutboundIn(data)
        guard context.channel.isActive else {
            for reply in request.replies { reply.fail(RedisConnection.Closed()) }
            promise?.fail(RedisConnection.Closed())
            return
        }
        self.waiting.append(contentsOf: request.replies)
        switch request.command {
        case .encoded(let bytes):
            context.write(self.wrapOutboundOut(bytes), promise: promise)
        case .madeAtWrite(let make):
            var bytes = context.channel.allocator.buffer(capacity: 64)
            bytes.writeRESPCommand(make())
            context.write(self.wrapOutboundOut(bytes), promise: promise)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        if var received = self.received {
            received.writeBuffer(&bytes)
            self.received = received
        } else {
            self.received = bytes
        }
        do {
            while var buffer = self.received, let token = try RESPToken(consuming: &buffer, limits: self.limits) {
                self.received = buffer.readableBytes > 0 ? buffer : nil
                self.dispatch(token)
            }
        } catch {
            self.failAll(error)
            context.close(promise: nil)
        }
    }

    private func dispatch(_ token: RESPToken) {
        switch token.type {
        case .attribute:
            return
        case .array, .push:
            if let onMessage = self.onMessage, let message = Self.message(token) {
                onMessage(message)
                return
            }
        default:
            break
        }
        self.waiting.popFirst()?.succeed(token)
    }

    /// A `["message", channel, payload]` push.
    private static func message(_ token: RESPToken) -> RedisConnection.Message? {
        guard let elements = token.array, elements.count == 3, elements[0].string == "message",
            let channel = elements[1].string, let payload = elements[2].bytes
        else { return nil }
        return RedisConnection.Message(channel: channel, payload: payload)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.failAll(RedisConnection.Closed())
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.failAll(error)
        context.close(promise: nil)
    }

    private func failAll(_ error: any Error) {
        while let promise = self.waiting.popFirst() { promise.fail(error) }
    }
}

@available(*, unavailable)
extension RedisReplyHandler: Sendable {}
