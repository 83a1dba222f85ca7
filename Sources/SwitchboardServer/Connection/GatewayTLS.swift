#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOSSL

/// The TLS side of the gateway's TCP listener: the server context made from the configured PEM files, and the
/// start-up warning about login tokens sent in the clear.
enum GatewayTLS {
    /// The oldest TLS version the gateway accepts (RFC 8996 deprecates 1.0 and 1.1).
    static let minimumVersion = TLSVersion.tlsv12

    /// Makes the TLS context of the TCP listener from `tls`'s certificate chain and private key.
    ///
    /// - Throws: ``GatewayStartError`` naming the file that cannot be read or parsed, or saying that the key does
    ///   not belong to the certificate.
    static func makeContext(_ tls: ServerConfiguration.TLS) throws(GatewayStartError) -> NIOSSLContext {
        let chainBytes = try Self.read(tls.certificateChainPath, what: "TLS certificate")
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMBytes(chainBytes)
        } catch {
            throw GatewayStartError(
                description: "TLS certificate \(tls.certificateChainPath) is not a PEM certificate chain (\(error))")
        }
        guard !chain.isEmpty else {
            throw GatewayStartError(description: "TLS certificate \(tls.certificateChainPath) holds no PEM certificate")
        }
        let keyBytes = try Self.read(tls.privateKeyPath, what: "TLS private key")
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(bytes: keyBytes, format: .pem)
        } catch {
            throw GatewayStartError(
                description: "TLS private key \(tls.privateKeyPath) is not an unencrypted PEM private key (\(error))")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        // TLS 1.0 and 1.1 are deprecated (RFC 8996): a client that offers nothing newer is refused.
        configuration.minimumTLSVersion = Self.minimumVersion
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw GatewayStartError(
                description: "TLS private key \(tls.privateKeyPath) does not fit the certificate "
                    + "\(tls.certificateChainPath) (\(error))")
        }
    }

    /// The whole file at `path`.
    private static func read(_ path: String, what: String) throws(GatewayStartError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw GatewayStartError(description: "cannot read \(what) \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw GatewayStartError(description: "cannot read \(what) \(path): \(String(cString: strerror(errno)))")
            }
            if count == 0 { return bytes }
            bytes += chunk[0..<count]
        }
    }
}

extension ServerConfiguration {
    /// The start-up warning for a gateway whose login tokens would cross the network in the clear: it requires
    /// tokens (a token secret), listens on a TCP address that is not loopback, and has no TLS. Nil otherwise.
    package var cleartextTokenWarning: String? {
        guard self.requiresTokens, self.tls == nil else { return nil }
        let exposed = [("TCP", self.tcpHost), ("WebSocket", self.webSocket?.host)]
            .compactMap { name, host in host.map { (name, $0) } }.filter { !SwitchboardGateway.isLoopback($0.1) }
        guard let (listener, host) = exposed.first else { return nil }
        return "login tokens cross the network in the clear: \(listener) listens on \(host), which is not loopback, "
            + "without TLS (give a certificate and key: --tls-cert, --tls-key)"
    }
}
