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

/// Serves `GET /metrics` (Prometheus text format), `GET /health` (``GatewayHealth`` as JSON) and, when it is given
/// an ``Inspector``, the inspector's page and API under `/inspector` over HTTP/1.1, as a ServiceLifecycle service.
///
/// ``bind()`` opens the listening socket (``GatewayApplication`` does so before the gateway starts, so that a port in
/// use stops the start); ``run()`` binds it if that was not done and serves until graceful shutdown.
///
/// Each connection has at most one answer in flight: while it is unsent, the connection is not read, so a client
/// that pipelines requests without reading their answers holds one answer, not one per request. A connection gets
/// ``Limits/requestTimeout`` to send a whole request once it started one, ``Limits/idleTimeout`` with no request or
/// with an answer it does not read; HTTP/1.0 without keep-alive (and `Connection: close`) closes after the answer;
/// beyond ``Limits/maxConnections`` a connection is answered 503 and closed.
public final class MetricsEndpoint: Service, Sendable {
    /// What one client may hold of the endpoint.
    public struct Limits: Sendable {
        /// Open connections at most; more are answered 503 and closed.
        public var maxConnections = 64
        /// How long a client may take to send a whole request once its first byte arrived (slowloris).
        public var requestTimeout: TimeAmount = .seconds(10)
        /// How long a connection may stay without a request, or with an answer it does not read.
        public var idleTimeout: TimeAmount = .seconds(30)

        /// The defaults: 64 connections, 10 s per request, 30 s idle.
        public init() {}
    }

    private let host: String
    private let port: Int
    private let limits: Limits
    private let render: @Sendable () -> [UInt8]
    private let health: @Sendable () -> GatewayHealth
    private let inspector: Inspector?
    private let logger: Logger
    private let eventLoopGroup: any EventLoopGroup
    private let channel = Mutex<(any Channel)?>(nil)
    private let openConnections = Atomic<Int>(0)

    /// Creates the endpoint; `render` produces the exposition text on each scrape, `health` the health report.
    ///
    /// - Parameters:
    ///   - host: the address to bind (`127.0.0.1` by default; `0.0.0.0` or `::` for every interface).
    ///   - port: the port (0: any free one; ``bind()`` says which).
    ///   - eventLoopGroup: the loops the endpoint's channels run on (``GatewayApplication`` gives it the gateway's).
    ///   - limits: connections, request and idle timeouts.
    ///   - inspector: serves `/inspector` and `/inspector/api/…` (nil: those paths are 404).
    public init(
        host: String = "127.0.0.1", port: Int, eventLoopGroup: any EventLoopGroup, logger: Logger,
        limits: Limits = Limits(),
        render: @escaping @Sendable () -> [UInt8],
        health: @escaping @Sendable () -> GatewayHealth = { GatewayHealth(status: .ok, connections: 0) },
        inspector: Inspector? = nil
    ) {
        self.inspector = inspector
        self.host = host
        self.port = port
        self.limits = limits
        self.eventLoopGroup = eventLoopGroup
        self.render = render
        self.health = health
        self.logger = logger
    }

    /// Connections open now (those refused over the limit not counted).
    public var connectionCount: Int { self.openConnections.load(ordering: .relaxed) }

    /// Opens the listening socket, once.
    ///
    /// - Returns: the address it is bound to.
    /// - Throws: the socket error when the address cannot be bound (in use, not an address of this machine).
    @discardableResult
    public func bind() async throws -> SocketAddress? {
        if let channel = self.channel.withLock({ $0 }) { return channel.localAddress }
        let render = self.render
        let health = self.health
        let inspector = self.inspector
        let limits = self.limits
        let channel = try await ServerBootstrap(group: self.eventLoopGroup)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            // Small reads, one per read event: what a connection has sent but the endpoint not yet answered stays
            // small too (requests are read only while no answer is unsent).
            .childChannelOption(.maxMessagesPerRead, value: 1)
            .childChannelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 8 << 10))
            .childChannelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    guard self.admit(channel) else {
                        try pipeline.addHandler(MetricsRefusal())
                        return
                    }
                    try pipeline.configureHTTPServerPipeline(withPipeliningAssistance: false)
                    try pipeline.addHandler(MetricsBytesWatch(), position: .first)
                    try pipeline.addHandler(MetricsHTTPHandler(limits: limits, render: render, health: health, inspector: inspector))
                }
            }
            .bind(host: self.host, port: self.port).get()
        self.channel.withLock { $0 = channel }
        self.logger.info(
            "metrics endpoint listening",
            metadata: [
                "address": "\(channel.localAddress.map { "\($0)" } ?? "?")", "paths": inspector == nil ? "/metrics /health" : "/metrics /health /inspector",
                "maxConnections": "\(limits.maxConnections)",
            ])
        return channel.localAddress
    }

    /// Counts `channel` against ``Limits/maxConnections`` until it closes; false (counting nothing) over the limit.
    private func admit(_ channel: any Channel) -> Bool {
        while true {
            let open = self.openConnections.load(ordering: .relaxed)
            guard open < self.limits.maxConnections else { return false }
            if self.openConnections.compareExchange(expected: open, desired: open + 1, ordering: .relaxed).exchanged {
                break
            }
        }
        channel.closeFuture.whenComplete { _ in self.openConnections.subtract(1, ordering: .relaxed) }
        return true
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

    /// Closes the listening socket (``run()`` returns); open connections end on their own.
    public func close() async {
        guard let channel = self.channel.withLock({ $0 }) else { return }
        try? await channel.close()
    }
}

/// One answer of the endpoint: status, content type, body and any further headers.
struct MetricsAnswer: Sendable {
    var status: HTTPResponseStatus
    var contentType: String
    var body: [UInt8]
    /// Headers besides Content-Type, Content-Length and Connection.
    var headers: [(String, String)] = []
}

/// Answers a connection over the endpoint's limit with 503 and closes it, reading nothing.
final class MetricsRefusal: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    func channelActive(context: ChannelHandlerContext) {
        let body = "too many connections to the metrics endpoint\n"
        let answer =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: \(body.utf8.count)\r\n"
            + "Connection: close\r\n\r\n" + body
        context.writeAndFlush(self.wrapOutboundOut(ByteBuffer(string: answer))).assumeIsolated().whenComplete { _ in
            context.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}

/// Tells the HTTP handler, ahead of the decoder, that bytes of a request arrived (its request timeout starts).
final class MetricsBytesWatch: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    /// The event the HTTP handler sees.
    struct BytesArrived {}

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireUserInboundEventTriggered(BytesArrived())
        context.fireChannelRead(data)
    }
}

/// One connection of the endpoint: answers its requests one at a time, reads only while no answer is unsent, and
/// closes it when a timeout passes.
final class MetricsHTTPHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// Where the connection is.
    private enum Phase {
        /// No request has begun: the idle timeout runs.
        case idle
        /// Bytes of a request arrived: the request timeout runs.
        case receiving
        /// An answer is being sent: the connection is not read; the idle timeout runs (a client that does not read).
        case answering
    }

    private let limits: MetricsEndpoint.Limits
    private let render: @Sendable () -> [UInt8]
    private let health: @Sendable () -> GatewayHealth
    private let inspector: Inspector?
    private var phase = Phase.idle
    private var request: HTTPRequestHead?
    /// Whole requests that came while an answer was unsent (already decoded from bytes read before; no more are
    /// read until they are answered).
    private var queued = CircularBuffer<HTTPRequestHead>()
    /// A read the channel asked for while an answer was unsent.
    private var readHeld = false
    private var timer: Scheduled<Void>?

    init(
        limits: MetricsEndpoint.Limits, render: @escaping @Sendable () -> [UInt8],
        health: @escaping @Sendable () -> GatewayHealth, inspector: Inspector?
    ) {
        self.limits = limits
        self.render = render
        self.health = health
        self.inspector = inspector
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.enter(.idle, context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.enter(.idle, context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.timer?.cancel()
        self.timer = nil
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is MetricsBytesWatch.BytesArrived {
            if self.phase == .idle { self.enter(.receiving, context: context) }
            return
        }
        context.fireUserInboundEventTriggered(event)
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
            if self.phase == .answering {
                self.queued.append(request)
            } else {
                self.answer(request, context: context)
            }
        }
    }

    /// Holds the channel's reads while an answer is unsent: the client's further requests wait in its socket.
    func read(context: ChannelHandlerContext) {
        if self.phase == .answering {
            self.readHeld = true
        } else {
            context.read()
        }
    }

    private func answer(_ request: HTTPRequestHead, context: ChannelHandlerContext) {
        self.enter(.answering, context: context)
        // The inspector's API answers later (a token to verify, areas to ask): the connection stays unread meanwhile,
        // and the idle timeout runs as for an answer the client does not read.
        self.answer(request, on: context.eventLoop).assumeIsolated().whenComplete { result in
            guard context.channel.isActive else { return }
            switch result {
            case .success(let answer):
                self.send(answer, to: request, context: context)
            case .failure:
                self.send(
                    MetricsAnswer(status: .internalServerError, contentType: "text/plain", body: Array("failed\n".utf8)),
                    to: request, context: context)
            }
        }
    }

    private func send(_ answer: MetricsAnswer, to request: HTTPRequestHead, context: ChannelHandlerContext) {
        let status = answer.status
        let body = answer.body
        let keepAlive = request.isKeepAlive
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: answer.contentType)
        headers.add(name: "Content-Length", value: "\(body.count)")
        for (name, value) in answer.headers { headers.add(name: name, value: value) }
        if status == .methodNotAllowed { headers.add(name: "Allow", value: "GET, HEAD") }
        if !keepAlive {
            headers.add(name: "Connection", value: "close")
        } else if request.version.major == 1 && request.version.minor == 0 {
            headers.add(name: "Connection", value: "keep-alive")
        }
        let head = HTTPResponseHead(version: request.version, status: status, headers: headers)
        context.write(self.wrapOutboundOut(.head(head)), promise: nil)
        if request.method != .HEAD {
            context.write(self.wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
        }
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: written)
        written.futureResult.assumeIsolated().whenComplete { result in
            guard case .success = result, keepAlive else {
                context.close(promise: nil)
                return
            }
            self.answered(context: context)
        }
    }

    /// The answer is in the socket: the next queued request, or reading again.
    private func answered(context: ChannelHandlerContext) {
        if let next = self.queued.popFirst() {
            self.answer(next, context: context)
            return
        }
        // Part of the next request may have arrived with the last one: its time runs from now.
        self.enter(self.request == nil ? .idle : .receiving, context: context)
        if self.readHeld {
            self.readHeld = false
            context.read()
        }
    }

    /// Moves to `phase` and starts its timeout (none while answering a queued request is due at once).
    private func enter(_ phase: Phase, context: ChannelHandlerContext) {
        self.phase = phase
        self.timer?.cancel()
        let timeout = phase == .receiving ? self.limits.requestTimeout : self.limits.idleTimeout
        self.timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [weak self] in
            guard let self, self.phase == phase else { return }
            context.close(promise: nil)
        }
    }

    private func answer(_ request: HTTPRequestHead, on eventLoop: any EventLoop) -> EventLoopFuture<MetricsAnswer> {
        guard request.method == .GET || request.method == .HEAD else {
            return eventLoop.makeSucceededFuture(
                MetricsAnswer(status: .methodNotAllowed, contentType: "text/plain", body: Array("GET or HEAD only\n".utf8)))
        }
        let path = request.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        if let inspector = self.inspector, Inspector.serves(path) {
            return inspector.answer(request, path: path, on: eventLoop)
        }
        switch path {
        case "/metrics":
            return eventLoop.makeSucceededFuture(
                MetricsAnswer(status: .ok, contentType: "text/plain; version=0.0.4", body: self.render()))
        case "/health":
            let health = self.health()
            return eventLoop.makeSucceededFuture(
                MetricsAnswer(
                    status: health.httpStatus, contentType: "application/json", body: Array((health.json + "\n").utf8)))
        default:
            return eventLoop.makeSucceededFuture(
                MetricsAnswer(
                    status: .notFound, contentType: "text/plain", body: Array("not found; try /metrics or /health\n".utf8)))
        }
    }
}

@available(*, unavailable)
extension MetricsHTTPHandler: Sendable {}

@available(*, unavailable)
extension MetricsBytesWatch: Sendable {}

@available(*, unavailable)
extension MetricsRefusal: Sendable {}
