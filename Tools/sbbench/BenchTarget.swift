import ArgumentParser
import NIOCore
import NIOPosix

/// Where the load generator connects: a TCP address or a Unix socket.
enum BenchTarget: Sendable, Equatable, CustomStringConvertible {
    case tcp(host: String, port: Int)
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

    /// "tcp" or "unix", for reports.
    var transport: String {
        switch self {
        case .tcp: return "tcp"
        case .unix: return "unix"
        }
    }

    var description: String {
        switch self {
        case .tcp(let host, let port): return "\(host):\(port)"
        case .unix(let path): return path
        }
    }

    /// Connects a bootstrap to this target.
    func connect(_ bootstrap: ClientBootstrap) -> EventLoopFuture<any Channel> {
        switch self {
        case .tcp(let host, let port): return bootstrap.connect(host: host, port: port)
        case .unix(let path): return bootstrap.connect(unixDomainSocketPath: path)
        }
    }
}
