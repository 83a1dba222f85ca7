#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import SwitchboardWire
import Synchronization

/// Errors the gateway reports at start.
public struct GatewayStartError: Error, CustomStringConvertible {
    /// What went wrong.
    public var description: String
}

/// The gateway: TCP and Unix-socket listeners feeding ``ConnectionHandler``s, run as a ServiceLifecycle service.
///
/// On graceful shutdown it stops accepting, sends every client GOAWAY (8002), answers the requests already in
/// flight, waits up to ``ServerConfiguration/shutdownGracePeriod`` for connections to finish, then closes the rest.
public final class SwitchboardGateway: Service, Sendable {
    /// Addresses the listeners bound, once running.
    public struct BoundAddresses: Sendable {
        /// The TCP address, if TCP is on.
        public var tcp: SocketAddress?
        /// The Unix socket path, if on.
        public var unixSocketPath: String?
        /// The WebSocket listener's address, if on.
        public var webSocket: SocketAddress?

        /// Creates addresses (clients and tests that know where a gateway listens).
        public init(tcp: SocketAddress? = nil, unixSocketPath: String? = nil, webSocket: SocketAddress? = nil) {
            self.tcp = tcp
            self.unixSocketPath = unixSocketPath
            self.webSocket = webSocket
        }
    }

    private let configuration: ServerConfiguration
    private let core: GatewayCore
    private let eventLoopGroup: MultiThreadedEventLoopGroup
    /// Whether the gateway made its loops (and shuts them down when it stops) or was given them.
    private let ownsEventLoopGroup: Bool
    private let onRunning: @Sendable (BoundAddresses) -> Void
    private let listeners = Mutex<[SocketListener]>([])

    /// The sessions of this gateway (command areas use it to reach users).
    public var registry: SessionRegistry { self.core.registry }
    /// The TLS context, token authority and login policy of new connections (the inspector verifies tokens with them).
    var credentials: GatewayCredentials { self.core.credentials }

    /// Creates a gateway.
    ///
    /// - Parameters:
    ///   - handlers: the command areas; ops without a handler are answered with `unavailable` (8004).
    ///   - observers: told when sessions start and end.
    ///   - eventLoopGroup: the loops connections run on, owned by the caller (``GatewayApplication`` shares them
    ///     with the areas' timers and shuts them down after its stores); nil: the gateway makes
    ///     ``ServerConfiguration/eventLoopThreads`` loops and shuts them down when it stops.
    ///   - loginPolicy: consulted by every handshake once the credentials are good (bans, revoked tokens).
    ///   - onRunning: called with the bound addresses once the listeners are up.
    public init(
        configuration: ServerConfiguration,
        handlers: [any RequestHandler] = [],
        observers: [any SessionObserver] = [],
        registry: SessionRegistry = SessionRegistry(),
        metrics: GatewayMetrics = GatewayMetrics(),
        logger: Logger = Logger(label: "switchboard"),
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis,
        eventLoopGroup: MultiThreadedEventLoopGroup? = nil,
        loginPolicy: (any LoginPolicy)? = nil,
        onRunning: @escaping @Sendable (BoundAddresses) -> Void = { _ in }
    ) {
        self.configuration = configuration
        self.eventLoopGroup =
            eventLoopGroup ?? MultiThreadedEventLoopGroup(numberOfThreads: max(1, configuration.eventLoopThreads))
        self.ownsEventLoopGroup = eventLoopGroup == nil
        self.core = GatewayCore(
            configuration: configuration, registry: registry,
            handlers: handlers, observers: observers, metrics: metrics,
            logger: logger, nowMillis: nowMillis, flushBatches: FlushBatches(group: self.eventLoopGroup),
            inboxes: LoopInboxes(group: self.eventLoopGroup), loginPolicy: loginPolicy)
        self.onRunning = onRunning
    }

    /// Runs until graceful shutdown (or cancellation) and returns once every connection is closed.
    public func run() async throws {
        do {
            try await self.runListeners()
        } catch {
            if self.ownsEventLoopGroup { try? await self.eventLoopGroup.shutdownGracefully() }
            throw error
        }
        if self.ownsEventLoopGroup { try await self.eventLoopGroup.shutdownGracefully() }
    }

    private func runListeners() async throws {
        let configuration = self.configuration
        for host in [configuration.tcpHost, configuration.webSocket?.host].compactMap({ $0 })
        where !configuration.requiresTokens && !Self.isLoopback(host) {
            throw GatewayStartError(
                description: "open development mode (no token secret) only listens on loopback, not \(host)")
        }
        // The TLS files are read before anything is bound: a bad file fails start-up with the file's name.
        var tlsContext: NIOSSLContext?
        if let tls = configuration.tls, configuration.tcpHost != nil || configuration.webSocket != nil {
            tlsContext = try GatewayTLS.makeContext(tls)
        }
        if let tlsContext { self.core.credentials.setTLSContext(tlsContext) }
        if let warning = configuration.cleartextTokenWarning { self.core.logger.warning("\(warning)") }
        var bound = BoundAddresses()
        // Each listener with what its connections get: TLS for TCP and WebSocket when configured, never for the
        // Unix socket; the WebSocket listener's connections go through HTTP and the WebSocket codec first.
        var listeners: [(listener: SocketListener, tls: NIOSSLContext?, webSocket: ServerConfiguration.WebSocket?)] = []
        if let host = configuration.tcpHost {
            let listener = try SocketListener.tcp(host: host, port: configuration.tcpPort, backlog: Self.backlog)
            bound.tcp = listener.localAddress
            listeners.append((listener, tlsContext, nil))
        }
        if let webSocket = configuration.webSocket {
            let listener = try SocketListener.tcp(host: webSocket.host, port: webSocket.port, backlog: Self.backlog)
            bound.webSocket = listener.localAddress
            listeners.append((listener, tlsContext, webSocket))
        }
        if let path = configuration.unixSocketPath {
            try Self.removeStaleSocket(at: path)
            let listener = try SocketListener.unix(
                path: path, mode: configuration.unixSocketMode, backlog: Self.backlog)
            listeners.append((listener, nil, nil))
            bound.unixSocketPath = path
        }
        guard !listeners.isEmpty else { throw GatewayStartError(description: "no listener is configured") }
        for (listener, tls, webSocket) in listeners {
            listener.start(logger: self.core.logger, accepted: self.adopter(tls: tls != nil, webSocket: webSocket))
        }
        let running = listeners.map(\.listener)
        self.listeners.withLock { $0 = running }
        self.core.logger.info(
            "switchboard listening",
            metadata: [
                "tcp": "\(bound.tcp.map { "\($0)" } ?? "off")", "unix": "\(bound.unixSocketPath ?? "off")",
                "websocket": "\(bound.webSocket.map { "\($0)\(configuration.webSocket?.path ?? "/")" } ?? "off")",
                "tls": "\(tlsContext == nil ? "off" : "on (TCP, WebSocket)")",
                "auth": "\(!configuration.requiresTokens ? "open development mode (any user id)" : "tokens")",
            ])
        self.onRunning(bound)

        await withGracefulShutdownHandler {
            // Cancellation (without a graceful shutdown first) stops accepting too.
            await withTaskCancellationHandler {
                for listener in running { await listener.waitUntilStopped() }
            } onCancel: {
                self.listeners.withLock { listeners in
                    for listener in listeners { listener.stop() }
                }
            }
        } onGracefulShutdown: {
            self.listeners.withLock { listeners in
                for listener in listeners { listener.stop() }
            }
        }
        if let path = bound.unixSocketPath { unlink(path) }
        await self.drainConnections()
    }

    private func drainConnections() async {
        let connections = self.core.registry.beginDraining()
        self.core.logger.info("shutting down", metadata: ["connections": "\(connections.count)"])
        for connection in connections {
            let handler = connection.handler
            connection.eventLoop.execute { handler.value.drain() }
        }
        let deadline = NIODeadline.now() + self.configuration.shutdownGracePeriod
        // Cancelled (the application's shutdown limit passed), the gateway closes what is left at once.
        while self.core.registry.connectionCount > 0 && NIODeadline.now() < deadline && !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(20))
        }
        for connection in self.core.registry.allConnections() {
            let handler = connection.handler
            connection.eventLoop.execute { handler.value.forceClose() }
        }
        while self.core.registry.connectionCount > 0 {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Listen queue length of each listener.
    static let backlog: CInt = 4096

    /// What a listener does with accepted sockets: make each a channel on the next event loop (one task per loop
    /// for a batch), with a ``ConnectionHandler`` that knows the socket's descriptor.
    ///
    /// With `tls`, the connection's bytes go through a TLS handler instead, with the TLS context of the moment
    /// (``GatewayCredentials``): the ``ConnectionHandler`` is not told the descriptor, so it never writes to the
    /// socket directly (that would bypass the encryption), a ``PlainClientDetector`` answers a client that speaks
    /// plain frames to the TLS port, and a ``TLSHandshakeMonitor`` counts and closes failed handshakes.
    ///
    /// With `webSocket`, the connection speaks HTTP until its WebSocket upgrade (``WebSocketPipeline``).
    private func adopter(tls useTLS: Bool, webSocket: ServerConfiguration.WebSocket?) -> @Sendable ([CInt]) -> Void {
        let core = self.core
        let group = self.eventLoopGroup
        let window = ConnectionHandler.writeWindow(lowWaterMark: self.configuration.limits.outboundLowWaterMark)
        return { descriptors in
            let tls = useTLS ? core.credentials.tlsContext : nil
            var byLoop: [(loop: any EventLoop, descriptors: [CInt])] = []
            for descriptor in descriptors {
                let loop = group.next()
                if let index = byLoop.firstIndex(where: { $0.loop === loop }) {
                    byLoop[index].descriptors.append(descriptor)
                } else {
                    byLoop.append((loop, [descriptor]))
                }
            }
            for (loop, descriptors) in byLoop {
                loop.execute {
                    for descriptor in descriptors {
                        // On its loop, so the channel is set up at once (no task per connection).
                        _ = ClientBootstrap(group: loop)  // sets TCP_NODELAY (NIO skips it for Unix sockets)
                            .channelOption(.socketOption(.so_keepalive), value: 1)
                            // A small write window: pushes beyond it wait in the connection handler, where replies
                            // pass them (SB-5.9-2); the handler applies the configured high-water mark and hard cap
                            // to the whole queue.
                            .channelOption(.writeBufferWaterMark, value: window)
                            .channelOption(.maxMessagesPerRead, value: 16)
                            // The handler sees the client's end of input before the channel closes: it reports a
                            // stream that ended inside a frame (1011) and drains a closing connection (SB-5.8-5).
                            .channelOption(.allowRemoteHalfClosure, value: true)
                            .channelInitializer { channel in
                                channel.eventLoop.makeCompletedFuture {
                                    let pipeline = channel.pipeline.syncOperations
                                    if let webSocket {
                                        try WebSocketPipeline.configure(
                                            channel, core: core, settings: webSocket, tls: tls, descriptor: descriptor)
                                        return
                                    }
                                    guard let tls else {
                                        let socket = DirectSocketWriter(descriptor: descriptor)
                                        try pipeline.addHandler(ConnectionHandler(core: core, socket: socket))
                                        return
                                    }
                                    try pipeline.addHandler(
                                        PlainClientDetector(metrics: core.metrics, logger: core.logger))
                                    try pipeline.addHandler(NIOSSLServerHandler(context: tls))
                                    try pipeline.addHandler(
                                        TLSHandshakeMonitor(metrics: core.metrics, logger: core.logger))
                                    try pipeline.addHandler(
                                        ConnectionHandler(core: core, socket: nil, descriptor: descriptor))
                                }
                            }
                            .withConnectedSocket(descriptor)
                    }
                }
            }
        }
    }

    /// Reads the TLS certificate chain and key files again and makes connections accepted from now on use them;
    /// open connections keep the TLS session they negotiated. Does nothing for a gateway without TLS.
    ///
    /// - Throws: ``GatewayStartError`` naming the file that cannot be read or parsed, or saying that the key does
    ///   not belong to the certificate; the gateway then goes on with the certificate it had.
    /// - Returns: whether the gateway has TLS (and the files were read).
    @discardableResult
    public func reloadTLS() throws(GatewayStartError) -> Bool {
        guard let tls = self.configuration.tls, self.configuration.tcpHost != nil || self.configuration.webSocket != nil
        else { return false }
        self.core.credentials.setTLSContext(try GatewayTLS.makeContext(tls))
        return true
    }

    /// Makes logins and token renewals from now on verify tokens with `secret`: tokens signed with the previous
    /// secret are refused from then on, sessions already logged in stay. Does nothing for a gateway in open
    /// development mode (no token secret at start).
    ///
    /// - Returns: whether the gateway requires tokens (and now verifies them with `secret`).
    @discardableResult
    public func replaceTokenSecret(_ secret: [UInt8]) -> Bool {
        self.core.credentials.replaceTokenSecret(secret)
        return self.configuration.requiresTokens
    }

    /// Makes logins and token renewals from now on verify tokens with `secret` (the default key, for tokens
    /// without a `kid`; nil: none) and `keys` by `kid`: a key added takes effect for new logins, a key removed
    /// refuses them; sessions already logged in stay. Does nothing for a gateway in open development mode.
    ///
    /// - Returns: whether the gateway requires tokens (and now verifies them with these keys).
    @discardableResult
    public func replaceTokenKeys(secret: [UInt8]?, keys: [String: TokenKey]) -> Bool {
        self.core.credentials.replaceKeys(secret: secret, keys: keys)
        return self.configuration.requiresTokens
    }

    /// Sets what may refuse a login or token renewal after its token verified (nil: nothing does): revoked tokens,
    /// banned users. Takes effect for the logins that start afterwards.
    public func setLoginPolicy(_ policy: (any LoginPolicy)?) {
        self.core.credentials.loginPolicy = policy
    }

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }

    /// Removes a socket file left by a crashed run; refuses to steal one a live server is listening on.
    static func removeStaleSocket(at path: String) throws {
        // lstat through FileManager (`struct stat` itself is out of reach here since jwt-kit loads CoreFoundation).
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { return }  // nothing there
        guard attributes[.type] as? FileAttributeType == .typeSocket else {
            throw GatewayStartError(description: "\(path) exists and is not a socket")
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw GatewayStartError(description: "unix socket path is too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if connected == 0 {
            throw GatewayStartError(description: "another server is listening on \(path)")
        }
        unlink(path)
    }
}
