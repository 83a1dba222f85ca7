import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import Synchronization

/// What `GET /health` reports: whether the gateway takes connections, how many it has, and (a cluster node) which
/// dependency it cannot reach.
public struct GatewayHealth: Sendable, Equatable {
    /// Where the gateway is in its life.
    public enum Status: String, Sendable {
        /// The listeners are not up yet.
        case starting
        /// Accepting connections.
        case ok
        /// Shutting down: no new connections, open ones are being drained.
        case draining
        /// A cluster node that cannot reach a dependency (``unreachable`` names it): its writes fail with 8001.
        case unavailable
    }

    /// Where the gateway is in its life.
    public var status: Status
    /// Open client connections.
    public var connections: Int
    /// The dependencies a cluster node cannot reach now (`postgresql`, `redis`).
    public var unreachable: [String]

    /// Creates a report.
    public init(status: Status, connections: Int, unreachable: [String] = []) {
        self.status = status
        self.connections = connections
        self.unreachable = unreachable
    }

    /// 200 while ``Status/ok``, else 503 (a load balancer stops sending clients).
    public var httpStatus: HTTPResponseStatus { self.status == .ok ? .ok : .serviceUnavailable }

    /// The body: `{"status":"ok","connections":3,"draining":false}`, with `"unreachable":["postgresql"]` added when a
    /// dependency is down.
    public var json: String {
        let draining = self.status == .draining
        let unreachable =
            self.unreachable.isEmpty ? "" : #","unreachable":["# + self.unreachable.map { #""\#($0)""# }.joined(separator: ",") + "]"
        return #"{"status":"\#(self.status.rawValue)","connections":\#(self.connections),"draining":\#(draining)\#(unreachable)}"#
    }
}

/// Serves `GET /metrics` (Prometheus text format) and `GET /health` (``GatewayHealth`` as JSON) over HTTP/1.1, as a
/// ServiceLifecycle service.
///
/// ``bind()`` opens the listening socket (``GatewayApplication`` does so before the gateway starts, so that a port in
/// use stops the start); ``run()`` binds it if that was not done and serves until graceful shutdown.
public final class MetricsEndpoint: Service, Sendable {
    private let host: String
    private let port: Int
    private let render: @Sendable () -> [UInt8]
    private let health: @Sendable () -> GatewayHealth
    private let logger: Logger
    private let eventLoopGroup: any EventLoopGroup
    private let channel = Mutex<(any Channel)?>(nil)

    /// Creates the endpoint; `render` produces the exposition text on each scrape, `health` the health report.
    ///
    /// - Parameters:
    ///   - host: the address to bind (`127.0.0.1` by default; `0.0.0.0` or `::` for every interface).
    ///   - port: the port (0: any free one; ``bind()`` says which).
    ///   - eventLoopGroup: the loops the endpoint's channels run on (``GatewayApplication`` gives it the gateway's).
    public init(
        host: String = "127.0.0.1", port: Int, eventLoopGroup: any EventLoopGroup, logger: Logger,
        render: @escaping @Sendable () -> [UInt8],
        health: @escaping @Sendable () -> GatewayHealth = { GatewayHealth(status: .ok, connections: 0) }
    ) {
        self.host = host
        self.port = port
        self.eventLoopGroup = eventLoopGroup
        self.render = render
        self.health = health
        self.logger = logger
    }

    /// Opens the listening socket, once.
    ///
    /// - Returns: the address it is bound to.
    /// - Throws: the socket error when the address cannot be bound (in use, not an address of this machine).
    @discardableResult
    public func bind() async throws -> SocketAddress? {
        if let channel = self.channel.withLock({ $0 }) { return channel.localAddress }
        let render = self.render
        let health = self.health
        let channel = try await ServerBootstrap(group: self.eventLoopGroup)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(MetricsHTTPHandler(render: render, health: health))
                }
            }
            .bind(host: self.host, port: self.port).get()
        self.channel.withLock { $0 = channel }
        self.logger.info(
            "metrics endpoint listening",
            metadata: ["address": "\(channel.localAddress.map { "\($0)" } ?? "?")", "paths": "/metrics /health"])
        return channel.localAddress
    }

    public func run() async throws {
        try await self.bind()
        guard let channel = self.channel.withLock({ $0 }) else { return }
        await withGracefulShutdownHandler {
            try? await channel.closeFuture.get()
        } onGracefulShutdown: {
            channel.close(promise: nil)
        }
    }
}

final class MetricsHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let render: @Sendable () -> [UInt8]
    private let health: @Sendable () -> GatewayHealth
    private var request: HTTPRequestHead?

    init(render: @escaping @Sendable () -> [UInt8], health: @escaping @Sendable () -> GatewayHealth) {
        self.render = render
        self.health = health
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.request = head
        case .body:
            break
        case .end:
            guard let request = self.request else { return }
            self.request = nil
            let (status, contentType, body) = self.answer(request)
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: contentType)
            headers.add(name: "Content-Length", value: "\(body.count)")
            if status == .methodNotAllowed { headers.add(name: "Allow", value: "GET, HEAD") }
            let head = HTTPResponseHead(version: request.version, status: status, headers: headers)
            context.write(self.wrapOutboundOut(.head(head)), promise: nil)
            if request.method != .HEAD {
                context.write(self.wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
            }
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
        }
    }

    private func answer(_ request: HTTPRequestHead) -> (HTTPResponseStatus, String, [UInt8]) {
        guard request.method == .GET || request.method == .HEAD else {
            return (.methodNotAllowed, "text/plain", Array("GET or HEAD only\n".utf8))
        }
        let path = request.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        switch path {
        case "/metrics":
            return (.ok, "text/plain; version=0.0.4", self.render())
        case "/health":
            let health = self.health()
            return (health.httpStatus, "application/json", Array((health.json + "\n").utf8))
        default:
            return (.notFound, "text/plain", Array("not found; try /metrics or /health\n".utf8))
        }
    }
}

@available(*, unavailable)
extension MetricsHTTPHandler: Sendable {}
