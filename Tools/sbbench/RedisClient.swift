import NIOCore
import NIOPosix

/// A minimal Redis connection speaking RESP2 over NIO, for the redis-fanout publisher: commands are answered in
/// order. (The subscribers are ``RawSubscriber`` sockets.)
struct RedisClient: Sendable {
    let channel: any Channel

    var eventLoop: any EventLoop { self.channel.eventLoop }

    /// Connects to a Redis server.
    static func connect(to target: BenchTarget, on loop: any EventLoop) -> EventLoopFuture<RedisClient> {
        let bootstrap = ClientBootstrap(group: loop)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(RedisClientHandler())
                }
            }
        return target.connect(bootstrap, on: loop).map { RedisClient(channel: $0) }
    }

    /// Sends the command `make` builds from the instant it is written, and returns the reply; an error reply is a
    /// `.error` value, not a failed future.
    func send(_ make: @escaping @Sendable (UInt64) -> [String]) -> EventLoopFuture<RESPValue> {
        let promise = self.channel.eventLoop.makePromise(of: RESPValue.self)
        self.channel.writeAndFlush(RedisCall(make: make, reply: promise)).cascadeFailure(to: promise)
        return promise.futureResult
    }

    /// Sends a command and returns the reply.
    func send(_ arguments: [String]) -> EventLoopFuture<RESPValue> {
        self.send { _ in arguments }
    }

    func close() {
        self.channel.close(promise: nil)
    }
}

/// What `RedisClient.send` writes into the pipeline.
struct RedisCall: Sendable {
    let make: @Sendable (UInt64) -> [String]
    let reply: EventLoopPromise<RESPValue>
}

/// The channel handler behind ``RedisClient``.
final class RedisClientHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = RedisCall
    typealias OutboundOut = ByteBuffer

    private var cumulation = ByteBuffer()
    private var pending = CircularBuffer<EventLoopPromise<RESPValue>>()

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let call = self.unwrapOutboundIn(data)
        var buffer = context.channel.allocator.buffer(capacity: 64)
        RESPEncoder.encodeCommand(call.make(NIODeadline.now().uptimeNanoseconds), into: &buffer)
        self.pending.append(call.reply)
        context.write(self.wrapOutboundOut(buffer), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        self.cumulation.writeBuffer(&bytes)
        do {
            while let value = try RESPParser.parse(from: &self.cumulation) {
                self.pending.popFirst()?.succeed(value)
            }
        } catch {
            context.close(promise: nil)
            return
        }
        self.cumulation.discardReadBytes()
    }

    func channelInactive(context: ChannelHandlerContext) {
        while let reply = self.pending.popFirst() { reply.fail(ChannelError.ioOnClosedChannel) }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

@available(*, unavailable)
extension RedisClientHandler: Sendable {}
