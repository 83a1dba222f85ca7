import Logging
import NIOCore
import NIOHTTP1
import NIOWebSocket

/// The HTTP side of a WebSocket connection before its upgrade: answers every request NIO's upgrader did not
/// upgrade (another path 404, a foreign origin 403, a subprotocol offer without `switchboard.v1` 400, anything
/// that is no WebSocket upgrade 426) and closes the connection, and closes a connection that has not upgraded
/// within the handshake timeout. The upgrade removes it from the pipeline.
final class WebSocketUpgradeGate: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    /// Its name in the pipeline (the upgrade removes it by name).
    static let name = "switchboard-websocket-gate"

    private let check: WebSocketUpgradeCheck
    private let timeout: TimeAmount
    private let logger: Logger
    private var timer: Scheduled<Void>?
    private var answered = false

    init(check: WebSocketUpgradeCheck, timeout: TimeAmount, logger: Logger) {
        self.check = check
        self.timeout = timeout
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // A connection that never upgrades holds no more than its socket for the handshake timeout.
        self.timer = context.eventLoop.assumeIsolated().scheduleTask(in: self.timeout) {
            context.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.timer?.cancel()
        self.timer = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = self.unwrapInboundIn(data), !self.answered else { return }
        self.answered = true
        let (status, reason) =
            self.check.refusal(head)
            ?? (head.headers.contains(name: "upgrade")
                ? (.badRequest, "not a valid WebSocket upgrade (RFC 6455 §4.2.1)")
                : (.upgradeRequired, "this port speaks WebSocket only"))
        self.logger.debug(
            "WebSocket upgrade refused",
            metadata: ["status": "\(status.code)", "uri": "\(head.uri)", "reason": "\(reason)"])
        var headers = HTTPHeaders()
        let body = ByteBuffer(string: reason + "\n")
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(body.readableBytes)")
        headers.add(name: "Connection", value: "close")
        if status == .upgradeRequired {
            headers.add(name: "Upgrade", value: "websocket")
            headers.add(name: "Sec-WebSocket-Version", value: "13")
        }
        let response = HTTPResponseHead(version: head.version, status: status, headers: headers)
        context.write(self.wrapOutboundOut(.head(response)), promise: nil)
        context.write(self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: written)
        written.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A refused upgrade (NIO tells it before it hands the request on, answered above) is no reason to close.
        if error is NIOWebSocketUpgradeError || error is HTTPServerUpgradeErrors { return }
        self.logger.debug("WebSocket connection error before the upgrade", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }
}
