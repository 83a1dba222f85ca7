import NIOCore
import NIOSSL
import SwitchboardWire
import Synchronization

extension ClientConfiguration {
    /// TLS for a TCP endpoint (``ClientConfiguration/tls``): which certificates the client trusts, the name the
    /// gateway's certificate must carry, and whether it is checked at all.
    ///
    /// ```swift
    /// var configuration = ClientConfiguration(endpoint: .tcp(host: "gateway.example", port: 7400), userID: "Tony")
    /// configuration.tls = .init()                                      // the system's trust store
    /// configuration.tls = .init(trustRoots: .pemFile("ca.pem"))        // a private CA
    /// configuration.tls = .init(trustRoots: .pemFile("ca.pem"), serverName: "gateway.internal")
    /// ```
    ///
    /// The TLS context (with the trust roots loaded) is made at the first connection and shared by every copy of
    /// this value, so reconnecting does not load them again; changing a property starts a new one.
    public struct TLS: Sendable {
        /// The certificates the client trusts to have signed the gateway's certificate.
        public enum TrustRoots: Sendable {
            /// The system's trust store (on Linux the CA bundle of the distribution). The default.
            case system
            /// The CA certificates in a PEM file (one or more `BEGIN CERTIFICATE` blocks), read at the first
            /// connection.
            case pemFile(String)
            /// CA certificates as PEM text held in memory.
            case pem(String)
            /// CA certificates already parsed.
            case certificates([NIOSSLCertificate])
        }

        /// How the client checks the gateway's certificate.
        public enum Verification: Sendable, Hashable {
            /// The certificate must chain to one of the trust roots and be valid for the server name (or, for an IP
            /// address, for the address connected to). The default.
            case full
            /// No check at all: any certificate for any name is accepted. The bytes are encrypted but anybody in
            /// between can read and change them; for tests and development only.
            case insecureNoVerification
        }

        /// The certificates trusted to sign the gateway's certificate.
        public var trustRoots: TrustRoots {
            didSet { self.cache = ContextCache() }
        }
        /// The name the gateway's certificate must be valid for, and the name sent in SNI; nil: the endpoint's host.
        /// An IP address is not sent in SNI; the certificate must then be valid for the address connected to.
        public var serverName: String? {
            didSet { self.cache = ContextCache() }
        }
        /// Whether the gateway's certificate is checked.
        public var verification: Verification {
            didSet { self.cache = ContextCache() }
        }
        /// The TLS context, made once and shared by copies of this value.
        private var cache = ContextCache()

        /// Creates TLS settings.
        ///
        /// - Parameters:
        ///   - trustRoots: the certificates trusted to sign the gateway's certificate (default: the system's).
        ///   - serverName: the name the certificate must be valid for (default: the endpoint's host).
        ///   - verification: whether the certificate is checked (default: fully).
        public init(trustRoots: TrustRoots = .system, serverName: String? = nil, verification: Verification = .full) {
            self.trustRoots = trustRoots
            self.serverName = serverName
            self.verification = verification
        }

        /// TLS that accepts any certificate (``Verification/insecureNoVerification``): for tests and development
        /// only.
        public static var insecureNoVerification: TLS { TLS(verification: .insecureNoVerification) }

        /// The TLS handler for a connection to `host`, with the shared context.
        ///
        /// - Throws: ``SwitchboardClientError`` of kind ``SwitchboardClientError/Kind/tlsFailed`` when the trust
        ///   roots cannot be loaded or the server name cannot be used.
        func makeHandler(host: String) throws(SwitchboardClientError) -> NIOSSLClientHandler {
            let context = try self.cache.context { () throws(SwitchboardClientError) in try self.makeContext() }
            let name = self.serverName ?? host
            // SNI carries host names only; with an IP address NIOSSL checks the certificate against the peer's address.
            let sniName = (try? SocketAddress(ipAddress: name, port: 0)) == nil ? name : nil
            do {
                return try NIOSSLClientHandler(context: context, serverHostname: sniName)
            } catch {
                throw SwitchboardClientError(
                    code: .unavailable, message: "cannot use \"\(name)\" as the TLS server name: \(error)",
                    kind: .tlsFailed)
            }
        }

        private func makeContext() throws(SwitchboardClientError) -> NIOSSLContext {
            var configuration = TLSConfiguration.makeClientConfiguration()
            // TLS 1.0 and 1.1 are deprecated (RFC 8996).
            configuration.minimumTLSVersion = .tlsv12
            switch self.verification {
            case .full: configuration.certificateVerification = .fullVerification
            case .insecureNoVerification: configuration.certificateVerification = .none
            }
            switch self.trustRoots {
            case .system:
                configuration.trustRoots = .default
            case .pemFile(let path):
                // NIOSSL's own error for a file it cannot open does not say why.
                if let reason = LibC.whyUnreadable(path) {
                    throw Self.trustRootsError("cannot read CA certificates from \(path): \(reason)")
                }
                do {
                    configuration.trustRoots = .certificates(
                        try Self.nonEmpty(NIOSSLCertificate.fromPEMFile(path), source: path))
                } catch let error as SwitchboardClientError {
                    throw error
                } catch {
                    throw Self.trustRootsError("cannot read CA certificates from \(path): \(error)")
                }
            case .pem(let text):
                do {
                    configuration.trustRoots = .certificates(
                        try Self.nonEmpty(NIOSSLCertificate.fromPEMBytes(Array(text.utf8)), source: "the PEM text"))
                } catch let error as SwitchboardClientError {
                    throw error
                } catch {
                    throw Self.trustRootsError("the CA certificates' PEM text does not parse: \(error)")
                }
            case .certificates(let certificates):
                configuration.trustRoots = .certificates(certificates)
            }
            do {
                return try NIOSSLContext(configuration: configuration)
            } catch {
                throw Self.trustRootsError("cannot set up TLS: \(error)")
            }
        }

        private static func nonEmpty(
            _ certificates: [NIOSSLCertificate], source: String
        ) throws(SwitchboardClientError) -> [NIOSSLCertificate] {
            guard !certificates.isEmpty else { throw Self.trustRootsError("\(source) holds no PEM certificate") }
            return certificates
        }

        private static func trustRootsError(_ message: String) -> SwitchboardClientError {
            SwitchboardClientError(code: .unavailable, message: message, kind: .tlsFailed)
        }
    }
}

/// The TLS context of one ``ClientConfiguration/TLS`` value, made on first use and shared by its copies.
private final class ContextCache: Sendable {
    private let made = Mutex<NIOSSLContext?>(nil)

    /// The context, made by `make` the first time (a failure is not kept: the next connection tries again).
    func context(
        _ make: () throws(SwitchboardClientError) -> NIOSSLContext
    ) throws(SwitchboardClientError) -> NIOSSLContext {
        try self.made.withLock { (made: inout NIOSSLContext?) throws(SwitchboardClientError) -> NIOSSLContext in
            if let made { return made }
            let context = try make()
            made = context
            return context
        }
    }
}
