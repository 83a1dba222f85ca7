import CoreMetrics
import Logging
import NIOCore
import SwitchboardWire

/// Sits in front of the TLS handler of a connection to the TLS port and looks at its first byte: a TLS client's
/// first record is a handshake (content type 22, 0x16); anything else is a client speaking plain frames to a TLS
/// port. That client is told so in its own terms, a GOAWAY 1007 `handshakeRequired` sent unencrypted ("this port
/// requires TLS"), logged at notice level, counted as a failed handshake, and closed. A TLS client's bytes go on to
/// the TLS handler, and this handler leaves the pipeline.
final class PlainClientDetector: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// The first byte of a TLS record that opens a handshake.
    static let handshakeRecord: UInt8 = 0x16
    /// What the plain client is told.
    static let message = "this port requires TLS: connect with TLS (sbctl --tls, ClientConfiguration.tls)"

    /// Sent down the pipeline once the client is refused: the TLS handler's complaints about the closing
    /// connection that follow are not a failed handshake (``TLSHandshakeMonitor`` counted and logged nothing more).
    struct Refused {}

    private let metrics: GatewayMetrics
    private let logger: Logger
    private var refused = false

    init(metrics: GatewayMetrics, logger: Logger) {
        self.metrics = metrics
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.refused else { return }
        let bytes = self.unwrapInboundIn(data)
        guard let first = bytes.getInteger(at: bytes.readerIndex, as: UInt8.self) else { return }
        guard first != Self.handshakeRecord else {
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        self.refused = true
        context.fireUserInboundEventTriggered(Refused())
        self.metrics.tlsHandshakeFailures.increment()
        self.metrics.recordError(.handshakeRequired)
        let peer = context.channel.remoteAddress.map { "\($0)" } ?? "unknown"
        self.logger.notice("plain client on the TLS port refused", metadata: ["peer": "\(peer)"])
        var frame = context.channel.allocator.buffer(capacity: 128)
        FrameEncoder().encode(
            .control(.goAway(GoAway(code: UInt64(ErrorCode.handshakeRequired.rawValue), message: Self.message))),
            into: &frame)
        context.writeAndFlush(self.wrapOutboundOut(frame)).assumeIsolated().whenComplete { _ in
            context.close(promise: nil)
        }
    }
}

@available(*, unavailable)
extension PlainClientDetector: Sendable {}
