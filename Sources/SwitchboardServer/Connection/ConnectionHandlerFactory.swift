import Logging
import NIOCore

/// The gateway's connection handling without its listeners: makes the ``ConnectionHandler`` that
/// ``SwitchboardGateway`` puts into every accepted channel, for channels the caller provides.
///
/// sbbench's in-process scenarios host these handlers in NIO's `EmbeddedChannel`, to build more sessions than a
/// process may open sockets (decoding, handshake, dispatch, the command areas and encoding all run as in the
/// gateway; only the socket is missing).
package struct ConnectionHandlerFactory: Sendable {
    private let core: GatewayCore

    /// Creates the shared state of the connections, as ``SwitchboardGateway/init(configuration:handlers:observers:registry:metrics:logger:nowMillis:eventLoopGroup:onRunning:)``
    /// does.
    ///
    /// - Parameters:
    ///   - eventLoops: the loops the connections' channels run on; each gets its end-of-tick flush and deadline
    ///     sweep, as the gateway's own loops do.
    package init(
        configuration: ServerConfiguration,
        handlers: [any RequestHandler],
        observers: [any SessionObserver],
        registry: SessionRegistry = SessionRegistry(),
        eventLoops: any EventLoopGroup,
        logger: Logger = Logger(label: "switchboard"),
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis
    ) {
        self.core = GatewayCore(
            configuration: configuration, registry: registry, handlers: handlers, observers: observers,
            metrics: GatewayMetrics(), logger: logger, nowMillis: nowMillis,
            flushBatches: FlushBatches(group: eventLoops), inboxes: LoopInboxes(group: eventLoops))
    }

    /// A handler for one new connection: add it to the channel's pipeline before the channel becomes active.
    package func makeConnectionHandler() -> any ChannelHandler {
        ConnectionHandler(core: self.core)
    }
}
