#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOEmbedded
import SwitchboardServer
import SwitchboardWire

/// The gateway's own connection handling and presence area in this process, with an `EmbeddedChannel` per session
/// instead of a socket, so the number of sessions is not bounded by the process's file descriptors.
///
/// Each session's channel holds the ``ConnectionHandler`` the gateway puts into accepted sockets. Requests go in as a
/// socket read delivers them (`channelRead` with the frame bytes, then `channelReadComplete`) and replies come back as
/// the bytes the handler wrote and flushed. The command areas are the session area (always there) and a
/// ``PresenceArea``; the others are not on the presence paths.
///
/// Everything runs on one `EmbeddedEventLoop`, on the thread that created the gateway, and the loop's virtual time
/// never advances: timers (the heartbeat and handshake sweep, presence interval events, leave timeouts) do not fire.
final class InProcessGateway {
    /// One logged-in session.
    struct Session {
        let user: String
        let channel: EmbeddedChannel
        var lastRequestID: UInt32 = 0
    }

    /// What the server wrote in answer to one read, and how long handling the read took.
    struct Reply {
        var messages: [SwitchboardMessage]
        /// Bytes the server wrote.
        var bytes: Int
        /// Wall-clock time from the read reaching the connection handler to the reply written and flushed.
        var nanoseconds: UInt64
        /// CPU time of this thread over the same span (without time the thread spent descheduled).
        var cpuNanoseconds: UInt64
    }

    let loop: EmbeddedEventLoop
    let presence: PresenceArea
    private let connections: ConnectionHandlerFactory
    private let features: [String]
    private let encoder = FrameEncoder()
    private var decoder = FrameDecoder(direction: .serverToClient)

    /// Creates a gateway for up to `sessions` sessions (the connection limit is raised when needed) whose clients
    /// ask for `features` in HELLO ("zlib" to have large replies compressed, as `SwitchboardClient` does).
    ///
    /// The areas are built by ``GatewayApplication`` (the presence area, in memory), on the embedded loop.
    init(sessions: Int, features: [String]) throws {
        var configuration = ServerConfiguration()
        configuration.tcpHost = nil
        configuration.unixSocketPath = nil
        configuration.limits.maxConnections = max(configuration.limits.maxConnections, sessions)
        var application = GatewayApplication.Configuration(server: configuration)
        application.areas = [.presence]
        application.inMemory = true
        let loop = EmbeddedEventLoop()
        let services = try GatewayApplication(configuration: application).makeServices(eventLoopGroup: loop)
        guard let presence = services.presence else { throw BenchFailure("the application built no presence area") }
        self.loop = loop
        self.presence = presence
        self.connections = ConnectionHandlerFactory(
            configuration: configuration, handlers: services.handlers, observers: services.observers,
            registry: services.sessions, eventLoops: loop)
        self.features = features
    }

    /// Opens a connection with the gateway's handler and logs `user` in (HELLO in, WELCOME out).
    func login(user: String) throws -> Session {
        let channel = EmbeddedChannel(handler: self.connections.makeConnectionHandler(), loop: self.loop)
        channel.connect(to: try SocketAddress(ipAddress: "127.0.0.1", port: 1), promise: nil)
        guard channel.isActive else { throw BenchFailure("the in-process connection of \(user) did not become active") }
        let hello = Hello(protocolVersion: 1, features: self.features, userId: user, clientName: SwitchboardVersion.productName("sbbench"))
        let reply = try self.deliver(.control(.hello(hello)), to: channel)
        guard reply.messages.count == 1, case .control(.welcome(let welcome)) = reply.messages[0], welcome.userId == user
        else {
            throw BenchFailure("HELLO of \(user) was not answered with its WELCOME: \(reply.messages)")
        }
        return Session(user: user, channel: channel)
    }

    /// Sends `requests` in one read, as a client that pipelines them, and returns everything the server wrote.
    func send(_ requests: [Request], from session: inout Session) throws -> Reply {
        var frames = ByteBuffer()
        for request in requests {
            session.lastRequestID &+= 1
            self.encoder.encode(.request(id: session.lastRequestID, request), into: &frames)
        }
        return try self.deliver(frames, to: session.channel)
    }

    /// Closes every session's connection (as a dropped socket would) and shuts the loop down.
    func close(_ sessions: [Session]) throws {
        for session in sessions { session.channel.close(promise: nil) }
        self.loop.run()
        try self.loop.syncShutdownGracefully()
    }

    private func deliver(_ message: SwitchboardMessage, to channel: EmbeddedChannel) throws -> Reply {
        var frame = ByteBuffer()
        self.encoder.encode(message, into: &frame)
        return try self.deliver(frame, to: channel)
    }

    /// Delivers `bytes` as one read and collects what the server wrote.
    private func deliver(_ bytes: ByteBuffer, to channel: EmbeddedChannel) throws -> Reply {
        let start = NIODeadline.now()
        let cpuStart = Self.threadCPUNanoseconds()
        try channel.writeInbound(bytes)
        let cpuEnd = Self.threadCPUNanoseconds()
        let elapsed = NIODeadline.now() - start
        // Work the read queued on the loop for later (none on the paths measured here) runs now, untimed.
        self.loop.run()
        var reply = Reply(
            messages: [], bytes: 0, nanoseconds: UInt64(max(elapsed.nanoseconds, 0)),
            cpuNanoseconds: cpuEnd > cpuStart ? cpuEnd - cpuStart : 0)
        while var written = try channel.readOutbound(as: ByteBuffer.self) {
            reply.bytes += written.readableBytes
            while let frame = try self.decoder.decodeFrame(from: &written) {
                reply.messages.append(try SwitchboardMessage.decode(frame))
            }
            guard written.readableBytes == 0 else { throw BenchFailure("the server wrote part of a frame") }
        }
        return reply
    }

    /// CPU time this thread has used.
    private static func threadCPUNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
