import CoreMetrics
import Logging
import NIOCore
import NIOTLS
import SwitchboardWire

/// Sits behind the TLS handler of a connection until its handshake completes, then leaves the pipeline.
///
/// A handshake that fails (a client that does not trust the certificate or offers only TLS 1.0 or 1.1, one that
/// disconnects half-way; a plain client is answered before, by ``PlainClientDetector``) is counted in
/// `switchboard_tls_handshake_failures_total`, logged at debug level in words (a failing client must not flood the
/// log) and closes the connection; the ``ConnectionHandler`` behind it sees only the close.
final class TLSHandshakeMonitor: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    private let metrics: GatewayMetrics
    private let logger: Logger
    private var failed = false

    init(metrics: GatewayMetrics, logger: Logger) {
        self.metrics = metrics
        self.logger = logger
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is PlainClientDetector.Refused {
            self.failed = true  // counted and logged as a plain client already
            return
        }
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted = tlsEvent {
            context.fireUserInboundEventTriggered(event)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Every error before the handshake completed is the handshake's; the TLS handler reports some twice.
        guard !self.failed else { return }
        self.failed = true
        self.metrics.tlsHandshakeFailures.increment()
        if self.logger.logLevel <= .debug {
            let peer = context.channel.remoteAddress.map { "\($0)" } ?? "unknown"
            // In words (NIOSSL's description holds BoringSSL's internals and the path the binary was built in).
            self.logger.debug(
                "TLS handshake failed", metadata: ["peer": "\(peer)", "error": "\(TLSFailureText.describe(error))"])
        }
        context.close(promise: nil)
    }
}

@available(*, unavailable)
extension TLSHandshakeMonitor: Sendable {}
