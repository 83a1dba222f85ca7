import ArgumentParser
import NIOCore
import NIOPosix
import NIOSSL

/// Where the load generator connects: a TCP address (plain or with TLS) or a Unix socket.
enum BenchTarget: Sendable, Equatable, CustomStringConvertible {
    case tcp(host: String, port: Int)
    /// A TCP address spoken to through TLS (`--tls`); only the scenarios whose connections are NIO channels use it.
    case tlsTCP(host: String, port: Int, tls: BenchTLS)
    case unix(path: String)

    /// Parses `host:port` (the host may be a bracketed IPv6 address).
    static func tcp(_ address: String) throws -> BenchTarget {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]),
            (1...65_535).contains(port)
        else {
            throw ValidationError("\(address.debugDescription) is not host:port")
        }
        var host = address[..<colon]
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        return .tcp(host: String(host), port: port)
    }

    /// "tcp", "tcp+tls" or "unix", for reports.
    var transport: String {
        switch self {
        case .tcp: return "tcp"
        case .tlsTCP: return "tcp+tls"
        case .unix: return "unix"
        }
    }

    var description: String {
        switch self {
        case .tcp(let host, let port), .tlsTCP(let host, let port, _): return "\(host):\(port)"
        case .unix(let path): return path
        }
    }

    /// Connects a bootstrap to this target (`loop`: the bootstrap's loop, for a TLS set-up that fails).
    func connect(_ bootstrap: ClientBootstrap, on loop: any EventLoop) -> EventLoopFuture<any Channel> {
        switch self {
        case .tcp(let host, let port):
            return bootstrap.connect(host: host, port: port)
        case .tlsTCP(let host, let port, let tls):
            do {
                // The TLS handler goes in front of the bootstrap's own handlers.
                let provider = try NIOSSLClientTLSProvider<ClientBootstrap>(
                    context: tls.context, serverHostname: tls.serverHostname)
                return NIOClientTCPBootstrap(bootstrap, tls: provider).enableTLS().connect(host: host, port: port)
            } catch {
                return loop.makeFailedFuture(error)
            }
        case .unix(let path):
            return bootstrap.connect(unixDomainSocketPath: path)
        }
    }
}

/// TLS towards the gateway (`--tls`, `--tls-ca`, `--tls-insecure`): one context for every connection of a run.
final class BenchTLS: Sendable, Equatable {
    let context: NIOSSLContext
    /// The SNI name and the name the certificate is checked against; nil for an IP address (NIOSSL then checks the
    /// certificate against the address connected to).
    let serverHostname: String?

    /// Makes the context: trusting the CA certificates in `caFile` (nil: the system's), or nothing checked at all
    /// with `insecure`.
    init(host: String, caFile: String?, insecure: Bool) throws {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12  // RFC 8996
        configuration.certificateVerification = insecure ? .none : .fullVerification
        if let caFile {
            let certificates: [NIOSSLCertificate]
            do {
                certificates = try NIOSSLCertificate.fromPEMFile(caFile)
            } catch {
                throw ValidationError("--tls-ca \(caFile): \(error)")
            }
            guard !certificates.isEmpty else { throw ValidationError("--tls-ca \(caFile) holds no PEM certificate") }
            configuration.trustRoots = .certificates(certificates)
        }
        self.context = try NIOSSLContext(configuration: configuration)
        self.serverHostname = (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil
    }

    static func == (lhs: BenchTLS, rhs: BenchTLS) -> Bool { lhs === rhs }
}
