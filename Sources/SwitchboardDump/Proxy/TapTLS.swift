#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOSSL
import NIOTLS

extension TapProxyConfiguration {
    /// TLS from the proxy to a TCP upstream gateway: the proxy is then a TLS client that checks the gateway's
    /// certificate, and the tap decodes the plaintext.
    public struct UpstreamTLS: Sendable, Hashable {
        /// A PEM file of CA certificates to trust; nil: the system's trust store.
        public var caCertificatePath: String?
        /// The name the gateway's certificate must be valid for, and the SNI name; nil: the upstream's host.
        public var serverName: String?
        /// Whether the gateway's certificate is checked; false accepts any certificate (tests and development only).
        public var verifiesCertificate: Bool

        /// Creates upstream TLS settings.
        ///
        /// - Parameters:
        ///   - caCertificatePath: a PEM file of CA certificates to trust; nil: the system's trust store.
        ///   - serverName: the name the certificate must be valid for; nil: the upstream's host.
        ///   - verifiesCertificate: false accepts any certificate (tests and development only).
        public init(caCertificatePath: String? = nil, serverName: String? = nil, verifiesCertificate: Bool = true) {
            self.caCertificatePath = caCertificatePath
            self.serverName = serverName
            self.verifiesCertificate = verifiesCertificate
        }
    }

    /// TLS for clients connecting to the proxy's TCP address: the proxy presents this certificate, so clients that
    /// use TLS towards the gateway can be pointed at the proxy.
    public struct ListenTLS: Sendable, Hashable {
        /// PEM file with the certificate chain, the proxy's certificate first.
        public var certificateChainPath: String
        /// PEM file with its private key (unencrypted).
        public var privateKeyPath: String

        /// Creates listening TLS settings from the two PEM files.
        public init(certificateChainPath: String, privateKeyPath: String) {
            self.certificateChainPath = certificateChainPath
            self.privateKeyPath = privateKeyPath
        }
    }
}

/// TLS that the proxy cannot set up: a file that cannot be read or parsed, TLS asked for a Unix socket address.
public struct TapTLSError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong.
    public var description: String
}

/// The TLS contexts of a running proxy, made once at start.
struct TapTLSContexts: Sendable {
    /// The client side towards the upstream, with the name its certificate is checked against.
    var upstream: (context: NIOSSLContext, serverName: String?)?
    /// The server side towards clients.
    var listen: NIOSSLContext?

    init(_ configuration: TapProxyConfiguration) throws(TapTLSError) {
        if let tls = configuration.upstreamTLS {
            guard case .tcp(let host, _) = configuration.upstream else {
                throw TapTLSError(description: "upstream TLS needs a TCP upstream, not \(configuration.upstream)")
            }
            var client = TLSConfiguration.makeClientConfiguration()
            client.minimumTLSVersion = .tlsv12  // RFC 8996
            client.certificateVerification = tls.verifiesCertificate ? .fullVerification : .none
            if let path = tls.caCertificatePath {
                client.trustRoots = .certificates(try Self.certificates(path, what: "CA certificates"))
            }
            let name = tls.serverName ?? host
            // SNI carries host names only; for an IP address NIOSSL checks the certificate against the peer address.
            let sniName = (try? SocketAddress(ipAddress: name, port: 0)) == nil ? name : nil
            self.upstream = (try Self.context(client), sniName)
        }
        if let tls = configuration.listenTLS {
            guard case .tcp = configuration.listen else {
                throw TapTLSError(
                    description: "TLS for clients needs a TCP listening address, not \(configuration.listen)")
            }
            let chain = try Self.certificates(tls.certificateChainPath, what: "TLS certificate")
            let key: NIOSSLPrivateKey
            guard access(tls.privateKeyPath, R_OK) == 0 else {
                let reason = String(cString: strerror(errno))
                throw TapTLSError(description: "cannot read TLS private key \(tls.privateKeyPath): \(reason)")
            }
            do {
                key = try NIOSSLPrivateKey(file: tls.privateKeyPath, format: .pem)
            } catch {
                throw TapTLSError(description: "cannot use TLS private key \(tls.privateKeyPath): \(error)")
            }
            var server = TLSConfiguration.makeServerConfiguration(
                certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
            server.minimumTLSVersion = .tlsv12  // RFC 8996
            self.listen = try Self.context(server)
        }
    }

    private static func certificates(_ path: String, what: String) throws(TapTLSError) -> [NIOSSLCertificate] {
        // NIOSSL's own error for a file it cannot open does not say why.
        guard access(path, R_OK) == 0 else {
            throw TapTLSError(description: "cannot read \(what) \(path): \(String(cString: strerror(errno)))")
        }
        let certificates: [NIOSSLCertificate]
        do {
            certificates = try NIOSSLCertificate.fromPEMFile(path)
        } catch {
            throw TapTLSError(description: "cannot use \(what) \(path): \(error)")
        }
        guard !certificates.isEmpty else { throw TapTLSError(description: "\(what) \(path) holds no PEM certificate") }
        return certificates
    }

    private static func context(_ configuration: TLSConfiguration) throws(TapTLSError) -> NIOSSLContext {
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw TapTLSError(description: "cannot set up TLS: \(error)")
        }
    }
}

/// Carries the TLS handshake of an upstream connection: it reads for the handshake while the ``RelayHandler``
/// behind it does not (that end reads only once paired with its client), completes `handshake` when the handshake
/// is done or has failed, and then leaves the pipeline.
final class UpstreamHandshakeGate: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    private let handshake: EventLoopPromise<Void>
    private var done = false

    init(handshake: EventLoopPromise<Void>) {
        self.handshake = handshake
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { context.read() }
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        context.read()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.fireChannelReadComplete()
        if !self.done { context.read() }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted = tlsEvent, !self.done {
            self.done = true
            context.fireUserInboundEventTriggered(event)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            self.handshake.succeed()
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !self.done {
            self.done = true
            self.handshake.fail(error)
        }
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !self.done {
            self.done = true
            self.handshake.fail(ChannelError.eof)
        }
        context.fireChannelInactive()
    }
}

@available(*, unavailable)
extension UpstreamHandshakeGate: Sendable {}
