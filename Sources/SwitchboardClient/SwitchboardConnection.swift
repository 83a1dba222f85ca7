import Logging
import NIOCore
import NIOPosix
import NIOSSL
import SwitchboardWire
import Synchronization

/// One logged-in connection to a gateway: requests with async responses, and the server's pushes as a stream.
///
/// This is the single-connection core. Apps usually want ``SwitchboardClient``, which adds typed calls, per-area
/// push streams and automatic reconnection on top of it.
///
/// Requests may be sent concurrently from any task; responses are matched by request id, never by order. At most
/// `WELCOME.maxInflight` requests are on the wire at once; more wait, in call order, for a free slot. A request
/// that times out keeps its id reserved until its response arrives or the connection closes (`Protocol/SPEC.md`
/// §5.4), so a late response can never answer a newer request.
///
/// Every error this type throws is a ``SwitchboardClientError``.
public final class SwitchboardConnection: Sendable {
    /// The server's WELCOME.
    public let welcome: Welcome
    /// Pushes in arrival order. Finishes when the connection closes.
    public let pushes: AsyncStream<Push>
    /// The same pushes with their frames' COMPRESSED flag, for ``SwitchboardClient``, which reads them from here
    /// (`pushes` is read from this stream: a connection's pushes have one reader).
    let receivedPushes: AsyncStream<ReceivedPush>
    /// Control frames the server sent after the handshake (GOAWAY, PONG), in arrival order; the latest 1,024 are
    /// kept for a consumer that is behind. Finishes when the connection closes.
    public let controlFrames: AsyncStream<Control>

    private let channel: any Channel
    private let handler: NIOLoopBound<ClientHandler>
    private let configuration: ClientConfiguration

    private init(
        welcome: Welcome, channel: any Channel, handler: NIOLoopBound<ClientHandler>,
        pushes: AsyncStream<ReceivedPush>, controlFrames: AsyncStream<Control>, configuration: ClientConfiguration
    ) {
        self.welcome = welcome
        self.channel = channel
        self.handler = handler
        self.receivedPushes = pushes
        let withoutFlags = PushesWithoutFlags(pushes)
        self.pushes = AsyncStream(unfolding: { await withoutFlags.next() })
        self.controlFrames = controlFrames
        self.configuration = configuration
    }

    /// Connects, sends HELLO and waits for WELCOME.
    ///
    /// - Throws: ``SwitchboardClientError``: with the server's GOAWAY code (kind ``SwitchboardClientError/Kind/goAway``)
    ///   when the server refuses the session, ``SwitchboardClientError/Kind/connectFailed`` when the gateway cannot
    ///   be reached, ``SwitchboardClientError/Kind/tlsFailed`` when TLS (``ClientConfiguration/tls``) cannot be set
    ///   up or its handshake fails, ``SwitchboardClientError/Kind/timedOut`` when no WELCOME came within the connect
    ///   timeout.
    public static func connect(
        _ configuration: ClientConfiguration, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> SwitchboardConnection {
        let (pushes, pushSink) = AsyncStream<ReceivedPush>.makeStream()
        let (controls, controlSink) = AsyncStream<Control>.makeStream(bufferingPolicy: .bufferingNewest(1024))
        // The handler is made on the channel's event loop; this box hands it back even if the server closes the
        // connection at once (a full server answers GOAWAY and closes before the handshake starts).
        let handlerBox = Mutex<NIOLoopBound<ClientHandler>?>(nil)
        let tls = try Self.tlsHandlerMaker(configuration)
        let bootstrap = ClientBootstrap(group: eventLoopGroup)
            .connectTimeout(TimeAmount(configuration.connectTimeout))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        // HELLO waits in the TLS handler until the handshake is done; a failed handshake closes the
                        // connection with the reason the TLSHandshakeHandler gives.
                        try channel.pipeline.syncOperations.addHandler(try tls.makeHandler())
                        try channel.pipeline.syncOperations.addHandler(TLSHandshakeHandler(serverName: tls.serverName))
                    }
                    let handler = ClientHandler(
                        configuration: configuration, pushSink: pushSink, controlSink: controlSink)
                    try channel.pipeline.syncOperations.addHandler(handler)
                    handlerBox.withLock { $0 = NIOLoopBound(handler, eventLoop: channel.eventLoop) }
                }
            }
        let channel: any Channel
        do {
            switch configuration.endpoint {
            case .tcp(let host, let port):
                channel = try await bootstrap.connect(host: host, port: port).get()
            case .unix(let path):
                channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
            }
        } catch {
            throw SwitchboardClientError(
                code: .unavailable, message: ConnectFailure.message(connecting: configuration.endpoint, failedWith: error),
                kind: .connectFailed)
        }
        guard let boundHandler = handlerBox.withLock({ $0 }) else {
            channel.close(promise: nil)
            throw SwitchboardClientError(code: .unavailable, message: "connection set-up failed", kind: .connectFailed)
        }
        do {
            let welcomeFuture = try await channel.eventLoop.submit {
                boundHandler.value.startHandshake(on: channel.eventLoop)
            }.get()
            let welcome = try await welcomeFuture.get()
            return SwitchboardConnection(
                welcome: welcome, channel: channel, handler: boundHandler, pushes: pushes,
                controlFrames: controls, configuration: configuration)
        } catch {
            channel.close(promise: nil)
            throw SwitchboardClientError(wrapping: error)
        }
    }

    /// What a TLS connection's pipeline needs: a new TLS handler per connection and the name the certificate is
    /// checked against.
    private struct TLSHandlerMaker: Sendable {
        let settings: ClientConfiguration.TLS
        let host: String

        var serverName: String { self.settings.serverName ?? self.host }

        func makeHandler() throws(SwitchboardClientError) -> NIOSSLClientHandler {
            try self.settings.makeHandler(host: self.host)
        }
    }

    /// The TLS handler maker for `configuration`, nil without TLS; the TLS context is made (and its trust roots
    /// loaded) here, before connecting, so that a bad trust-root file fails at once.
    ///
    /// - Throws: ``SwitchboardClientError`` of kind ``SwitchboardClientError/Kind/tlsFailed`` for TLS on a Unix
    ///   socket, trust roots that cannot be loaded, or a server name that cannot be used.
    private static func tlsHandlerMaker(
        _ configuration: ClientConfiguration
    ) throws(SwitchboardClientError) -> TLSHandlerMaker? {
        guard let settings = configuration.tls else { return nil }
        guard case .tcp(let host, _) = configuration.endpoint else {
            throw SwitchboardClientError(
                code: .unavailable, message: "TLS is for TCP endpoints, not \(configuration.endpoint)",
                kind: .tlsFailed)
        }
        let maker = TLSHandlerMaker(settings: settings, host: host)
        _ = try maker.makeHandler()
        return maker
    }

    /// Sends a request and waits for its response.
    ///
    /// - Parameter timeout: How long to wait for the response; the configuration's `requestTimeout` when nil.
    /// - Throws: ``SwitchboardClientError``: the server's error response, a timeout (8003), or a connection that
    ///   closed before the request was sent (``SwitchboardClientError/Kind/notConnected``) or answered
    ///   (``SwitchboardClientError/Kind/connectionLost``).
    public func send(_ request: Request, timeout: Duration? = nil) async throws -> Response {
        let handler = self.handler
        let timeout = timeout ?? self.configuration.requestTimeout
        do {
            let future = try await self.channel.eventLoop.submit {
                handler.value.send(request, timeout: timeout)
            }.get()
            return try await future.get()
        } catch {
            throw SwitchboardClientError(wrapping: error)
        }
    }

    /// Sends PING and waits for PONG.
    ///
    /// - Parameter timeout: How long to wait for the PONG; nil waits until it comes or the connection closes.
    /// - Throws: ``SwitchboardClientError``: ``SwitchboardClientError/Kind/timedOut`` (8003) when no PONG came in
    ///   time, ``SwitchboardClientError/Kind/notConnected`` or ``SwitchboardClientError/Kind/connectionLost`` when
    ///   the connection is or gets closed.
    public func ping(nonce: UInt64 = 1, timeout: Duration? = nil) async throws {
        let handler = self.handler
        let wait = timeout.map(TimeAmount.init)
        do {
            try await self.channel.eventLoop.submit { handler.value.ping(nonce: nonce, timeout: wait) }.get().get()
        } catch {
            throw SwitchboardClientError(wrapping: error)
        }
    }

    /// Logs out: the server answers, sends GOAWAY and closes.
    public func logout() async throws {
        _ = try await self.send(.logout(EmptyBody()))
        try? await self.channel.closeFuture.get()
    }

    /// Closes the connection without logging out (the server sees an abnormal end).
    public func close() async {
        try? await self.channel.close()
    }

    /// Writes raw bytes on the connection (tests of the server's handling of malformed input).
    public func writeRaw(_ bytes: ByteBuffer) async throws {
        try await self.channel.writeAndFlush(bytes)
    }

    /// Completes when the connection has closed.
    public func waitUntilClosed() async {
        try? await self.channel.closeFuture.get()
    }

    /// Whether the connection is open.
    public var isActive: Bool { self.channel.isActive }

    /// The GOAWAY the server sent, if any.
    public var goAway: GoAway? {
        get async {
            let handler = self.handler
            return try? await self.channel.eventLoop.submit { handler.value.receivedGoAway }.get()
        }
    }

    /// Why the connection closed: the server's GOAWAY (kind ``SwitchboardClientError/Kind/goAway``, its code),
    /// a dead or broken connection this side closed, or the server closing without GOAWAY. Nil while it is open.
    public var closeReason: SwitchboardClientError? {
        get async {
            await self.waitIfClosing()
            let handler = self.handler
            let reason: SwitchboardClientError?? = try? await self.channel.eventLoop.submit {
                handler.value.isClosed ? handler.value.closeReason() : nil
            }.get()
            if let reason { return reason }
            // The event loop is gone: the connection is closed, and why was not recorded.
            return self.channel.isActive
                ? nil : SwitchboardClientError(code: .unavailable, message: "the connection closed", kind: .connectionLost)
        }
    }

    /// Once the channel is closing, waits for the close to finish so the handler has recorded why.
    private func waitIfClosing() async {
        if !self.channel.isActive { await self.waitUntilClosed() }
    }
}
