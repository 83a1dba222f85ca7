import NIOCore
import NIOHTTP1
import NIOSSL
import NIOWebSocket

/// Sets up a connection of the WebSocket listener: (TLS,) HTTP/1.1 until the upgrade, then NIO's WebSocket codec,
/// a ``WebSocketBridge`` and the connection's ``ConnectionHandler``, which is admitted (counted against the
/// connection limit with the TCP and Unix-socket connections) once the upgrade is done.
enum WebSocketPipeline {
    /// Fragments a message may arrive in at most (browsers send a message as one frame).
    static let maxFragments = 1024

    /// The largest message a client may send: one frame of the largest size with its longest length prefix.
    static func maxMessageSize(_ limits: ServerConfiguration.Limits) -> Int {
        limits.maxFrameSize + 4
    }

    /// Adds the handlers of a new WebSocket connection to `channel` (on its event loop, before it is active).
    ///
    /// Without TLS the connection handler is told the socket's `descriptor`, and writes its messages to the socket
    /// directly as it does on TCP (one `sendmsg` per message, ``WebSocketBridge/sendDirectly(_:on:)``).
    static func configure(
        _ channel: any Channel, core: GatewayCore, settings: ServerConfiguration.WebSocket, tls: NIOSSLContext?,
        descriptor: CInt
    ) throws {
        let pipeline = channel.pipeline.syncOperations
        if let tls {
            try pipeline.addHandler(NIOSSLServerHandler(context: tls))
            try pipeline.addHandler(TLSHandshakeMonitor(metrics: core.metrics, logger: core.logger))
        }
        let check = WebSocketUpgradeCheck(settings: settings)
        let maxMessage = Self.maxMessageSize(core.configuration.limits)
        let upgrader = NIOWebSocketServerUpgrader(
            maxFrameSize: maxMessage, automaticErrorHandling: false,
            shouldUpgrade: { channel, head in
                channel.eventLoop.makeSucceededFuture(check.refusal(head) == nil ? check.acceptedHeaders(head) : nil)
            },
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    let bridge = WebSocketBridge(maxMessageSize: maxMessage)
                    let connection = ConnectionHandler(
                        core: core, socket: tls == nil ? DirectSocketWriter(descriptor: descriptor, webSocket: bridge) : nil,
                        descriptor: descriptor)
                    bridge.connection = connection
                    try pipeline.addHandler(
                        NIOWebSocketFrameAggregator(
                            minNonFinalFragmentSize: 1, maxAccumulatedFrameCount: Self.maxFragments,
                            maxAccumulatedFrameSize: maxMessage))
                    try pipeline.addHandler(bridge)
                    try pipeline.addHandler(connection)
                    // The channel has long been active: the connection handler learns it now, and is admitted.
                    try pipeline.context(handler: bridge).fireChannelActive()
                }
            })
        try pipeline.configureHTTPServerPipeline(
            withServerUpgrade: (
                upgraders: [upgrader],
                completionHandler: { context in
                    context.pipeline.syncOperations.removeHandler(name: WebSocketUpgradeGate.name, promise: nil)
                }
            ))
        try pipeline.addHandler(
            WebSocketUpgradeGate(check: check, timeout: core.configuration.handshakeTimeout, logger: core.logger),
            name: WebSocketUpgradeGate.name)
    }
}
