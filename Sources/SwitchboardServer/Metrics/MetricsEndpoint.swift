import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// Serves `GET /metrics` (Prometheus text format) on a loopback port, as a ServiceLifecycle service.
public final class MetricsEndpoint: Service, Sendable {
    private let host: String
    private let port: Int
    private let render: @Sendable () -> [UInt8]
    private let logger: Logger
    private let eventLoopGroup: any EventLoopGroup

    /// Creates the endpoint; `render` produces the exposition text on each scrape.
    ///
    /// - Parameter eventLoopGroup: the loops the endpoint's channels run on (``GatewayApplication`` gives it the
    ///   gateway's).
    public init(
        host: String = "127.0.0.1", port: Int, eventLoopGroup: any EventLoopGroup, logger: Logger,
        render: @escaping @Sendable () -> [UInt8]
    ) {
        self.host = host
        self.port = port
        self.eventLoopGroup = eventLoopGroup
        self.render = render
        self.logger = logger
    }

    public func run() async throws {
        let render = self.render
        let channel = try await ServerBootstrap(group: self.eventLoopGroup)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(MetricsHTTPHandler(render: render))
                }
            }
            .bind(host: self.host, port: self.port).get()
        self.logger.info("metrics endpoint listening", metadata: ["address": "\(channel.localAddress.map { "\($0)" } ?? "?")/metrics"])
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
    private var path = ""

    init(render: @escaping @Sendable () -> [UInt8]) {
        self.render = render
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.path = head.uri
        case .body:
            break
        case .end:
            let found = self.path == "/metrics"
            let body = found ? self.render() : Array("not found; try /metrics\n".utf8)
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: found ? "text/plain; version=0.0.4" : "text/plain")
            headers.add(name: "Content-Length", value: "\(body.count)")
            let head = HTTPResponseHead(version: .http1_1, status: found ? .ok : .notFound, headers: headers)
            context.write(self.wrapOutboundOut(.head(head)), promise: nil)
            context.write(self.wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

@available(*, unavailable)
extension MetricsHTTPHandler: Sendable {}
