import NIOCore
import NIOSSL
import NIOTLS
import SwitchboardWire

/// Sits behind the TLS handler of a client connection until the TLS handshake completes, then leaves the pipeline.
///
/// An error before that is the handshake's: it reaches the ``ClientHandler`` as a ``SwitchboardClientError`` of kind
/// ``SwitchboardClientError/Kind/tlsFailed`` that says what went wrong in words (an untrusted certificate, one for
/// another name, a gateway that does not speak TLS on that port).
final class TLSHandshakeHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    /// The name the certificate is checked against, for the message.
    private let serverName: String
    private var failed = false

    init(serverName: String) {
        self.serverName = serverName
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted = tlsEvent {
            context.fireUserInboundEventTriggered(event)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // The TLS handler may report one failure more than once; the first says why.
        guard !self.failed else { return }
        self.failed = true
        context.fireErrorCaught(
            SwitchboardClientError(
                code: .unavailable, message: Self.describe(error, serverName: self.serverName), kind: .tlsFailed))
    }

    /// A handshake failure in words, ending with the reason in words (``TLSFailureText``; never NIOSSL's own
    /// description, which holds BoringSSL's internals and the path the library was built in).
    static func describe(_ error: any Error, serverName: String) -> String {
        let detail = "\(error)"
        let reason = TLSFailureText.describe(detail)
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return "TLS handshake failed: the gateway's certificate is not valid for \"\(serverName)\" (\(reason))"
        }
        if detail.contains("CERTIFICATE_VERIFY_FAILED") {
            return "TLS handshake failed: the gateway's certificate is not trusted: it is not signed by one of the "
                + "trust roots, or has expired (\(reason))"
        }
        if detail.contains("WRONG_VERSION_NUMBER") || detail.contains("eofDuringHandshake")
            || detail.contains("PACKET_LENGTH_TOO_LONG")
        {
            return "TLS handshake failed: the gateway did not answer in TLS; is TLS on at \(serverName)? (\(reason))"
        }
        return "TLS handshake failed: \(reason)"
    }
}

@available(*, unavailable)
extension TLSHandshakeHandler: Sendable {}
