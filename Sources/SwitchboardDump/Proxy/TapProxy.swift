import NIOCore
import NIOPosix
import NIOSSL
import SwitchboardWire
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What the tap proxy listens on, where it forwards, and how it decodes.
public struct TapProxyConfiguration: Sendable {
    /// Where clients connect.
    public var listen: TapAddress
    /// The gateway the proxy connects each client to.
    public var upstream: TapAddress
    /// The largest frame and inflated body the tap decodes (forwarding has no limit).
    public var limits: FrameLimits = .default
    /// When set, each connection's frames are written to `connection-<id>.bin` in this directory.
    public var captureDirectory: String?
    /// How long connecting to the upstream may take (the TLS handshake included).
    public var upstreamConnectTimeout: TimeAmount = .seconds(10)
    /// TLS towards a TCP upstream; nil: plain.
    public var upstreamTLS: UpstreamTLS?
    /// TLS for clients on a TCP listening address; nil: plain.
    public var listenTLS: ListenTLS?

    /// Creates a configuration.
    public init(listen: TapAddress, upstream: TapAddress) {
        self.listen = listen
        self.upstream = upstream
    }
}

/// A running tap proxy: accepts clients, connects each to the upstream gateway, forwards the bytes of both
/// directions unchanged, and reports every frame to a ``DumpSink``.
///
/// Decoding never touches the forwarded bytes: a direction that stops decoding (garbage) is still forwarded, and a
/// client or upstream that closes ends only its own connection.
public final class TapProxy: Sendable {
    /// The address the proxy actually listens on (with the port the system chose for port 0).
    public let listeningAddress: TapAddress
    private let serverChannel: any Channel
    private let connections: ConnectionRegistry
    private let unixSocketPath: String?

    private init(
        listeningAddress: TapAddress, serverChannel: any Channel, connections: ConnectionRegistry,
        unixSocketPath: String?
    ) {
        self.listeningAddress = listeningAddress
        self.serverChannel = serverChannel
        self.connections = connections
        self.unixSocketPath = unixSocketPath
    }

    /// Starts listening.
    ///
    /// - Throws: ``TapTLSError`` when TLS cannot be set up (before anything is bound); when the listening address
    ///   cannot be bound. (A capture file that cannot be written is reported to the sink as
    ///   ``DumpEvent/Kind/captureFailed(path:reason:)``, and the connection is still proxied.)
    public static func start(
        _ configuration: TapProxyConfiguration, sink: any DumpSink,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> TapProxy {
        let tls = try TapTLSContexts(configuration)
        let connections = ConnectionRegistry()
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let id = connections.nextConnectionID()
                    connections.track(channel, isClient: true)
                    let tap = ConnectionTap(
                        id: id, limits: configuration.limits, sink: sink,
                        capture: Self.openCapture(configuration.captureDirectory, id: id, sink: sink))
                    if case .tcp = configuration.listen {
                        try channel.syncOptions?.setOption(.socketOption(.tcp_nodelay), value: 1)
                    }
                    if let context = tls.listen {
                        // The client's handshake runs once the end is paired and reads (see RelayHandler); a client
                        // that fails it closes its end like any other error.
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    }
                    let client = RelayHandler(side: .client, tap: tap)
                    try channel.pipeline.syncOperations.addHandler(client)
                    Self.connectUpstream(
                        for: client, clientChannel: channel, tap: tap, configuration: configuration, tls: tls.upstream,
                        connections: connections)
                }
            }
        let serverChannel: any Channel
        let bound: TapAddress
        let unixPath: String?
        switch configuration.listen {
        case .tcp(let host, let port):
            serverChannel = try await bootstrap.bind(host: host, port: port).get()
            bound = .tcp(host: host, port: serverChannel.localAddress?.port ?? port)
            unixPath = nil
        case .unix(let path):
            serverChannel = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true).get()
            bound = .unix(path: path)
            unixPath = path
        }
        sink.receive(
            DumpEvent(
                .listening(address: bound.description, upstream: configuration.upstream.description),
                time: .now()))
        return TapProxy(
            listeningAddress: bound, serverChannel: serverChannel, connections: connections, unixSocketPath: unixPath)
    }

    /// Stops accepting, closes every proxied connection (each reports its end), waits until the capture files are
    /// written, and removes the Unix socket file.
    public func stop() async {
        try? await self.serverChannel.close()
        let channels = self.connections.all()
        for channel in channels { channel.close(promise: nil) }
        for channel in channels { try? await channel.closeFuture.get() }
        await CaptureFile.drain()
        if let path = self.unixSocketPath { unlink(path) }
    }

    /// Completes when the listening socket has closed.
    public func waitUntilStopped() async {
        try? await self.serverChannel.closeFuture.get()
    }

    /// Client connections open right now.
    public var openConnections: Int { self.connections.clientCount }

    private static func openCapture(_ directory: String?, id: UInt64, sink: any DumpSink) -> CaptureFile? {
        guard let directory else { return nil }
        let path = directory + "/connection-\(id).bin"
        do {
            return try CaptureFile(path: path) { reason in
                sink.receive(DumpEvent(.captureFailed(path: path, reason: reason), time: .now(), connection: id))
            }
        } catch {
            sink.receive(DumpEvent(.captureFailed(path: path, reason: error.reason), time: .now(), connection: id))
            return nil
        }
    }

    private static func connectUpstream(
        for client: RelayHandler, clientChannel: any Channel, tap: ConnectionTap,
        configuration: TapProxyConfiguration, tls: (context: NIOSSLContext, serverName: String?)?,
        connections: ConnectionRegistry
    ) {
        let loop = clientChannel.eventLoop
        let boundTap = NIOLoopBound(tap, eventLoop: loop)
        // With TLS the ends are paired once the upstream's handshake is done, so that a failed one is reported as
        // the upstream being unreachable, with the reason.
        let handshake: EventLoopPromise<Void>? = tls == nil ? nil : loop.makePromise(of: Void.self)
        let bootstrap = ClientBootstrap(group: loop)
            .connectTimeout(configuration.upstreamConnectTimeout)
            .channelOption(.allowRemoteHalfClosure, value: true)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    connections.track(channel, isClient: false)
                    if case .tcp = configuration.upstream {
                        try channel.syncOptions?.setOption(.socketOption(.tcp_nodelay), value: 1)
                    }
                    if let tls, let handshake {
                        try channel.pipeline.syncOperations.addHandler(
                            try NIOSSLClientHandler(context: tls.context, serverHostname: tls.serverName))
                        try channel.pipeline.syncOperations.addHandler(UpstreamHandshakeGate(handshake: handshake))
                    }
                    try channel.pipeline.syncOperations.addHandler(RelayHandler(side: .upstream, tap: boundTap.value))
                }
            }
        var connecting: EventLoopFuture<any Channel>
        switch configuration.upstream {
        case .tcp(let host, let port): connecting = bootstrap.connect(host: host, port: port)
        case .unix(let path): connecting = bootstrap.connect(unixDomainSocketPath: path)
        }
        if let handshake {
            connecting.whenFailure { handshake.fail($0) }  // no channel, so no gate to complete it
            let tcpConnected = connecting
            connecting = tcpConnected.flatMap { channel in
                handshake.futureResult.flatMapErrorThrowing { error in
                    channel.close(promise: nil)
                    // In words: NIOSSL's description holds BoringSSL's internals and the build path.
                    throw TapTLSError(description: "TLS handshake failed: \(TLSFailureText.describe(error))")
                }.map { channel }
            }
        }
        let clientAddress = TapAddress.describe(clientChannel.remoteAddress)
        connecting.assumeIsolated().whenComplete { result in
            switch result {
            case .success(let upstreamChannel):
                guard let upstream = try? upstreamChannel.pipeline.syncOperations.handler(type: RelayHandler.self)
                else {
                    upstreamChannel.close(promise: nil)
                    return
                }
                // Even a client that already left is paired: what it sent before leaving is still delivered.
                tap.opened(client: clientAddress, upstream: configuration.upstream.description)
                RelayHandler.pair(client, upstream)
            case .failure(let error):
                tap.upstreamUnreachable(client: clientAddress, reason: "\(error)")
                clientChannel.close(promise: nil)
            }
        }
    }
}

/// The open channels of proxied connections (both ends), so that stopping the proxy can close them, and the
/// source of connection ids.
final class ConnectionRegistry: Sendable {
    private let state = Mutex<(nextID: UInt64, channels: [ObjectIdentifier: any Channel], clients: Int)>((1, [:], 0))

    /// A new connection id.
    func nextConnectionID() -> UInt64 {
        self.state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
    }

    /// Keeps `channel` until it closes.
    func track(_ channel: any Channel, isClient: Bool) {
        let key = ObjectIdentifier(channel)
        self.state.withLock {
            $0.channels[key] = channel
            if isClient { $0.clients += 1 }
        }
        channel.closeFuture.whenComplete { _ in
            self.state.withLock {
                $0.channels.removeValue(forKey: key)
                if isClient { $0.clients -= 1 }
            }
        }
    }

    func all() -> [any Channel] {
        self.state.withLock { Array($0.channels.values) }
    }

    var clientCount: Int { self.state.withLock { $0.clients } }
}
