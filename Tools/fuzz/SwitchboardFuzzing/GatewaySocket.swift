#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where a gateway listens.
package enum GatewayEndpoint: Sendable, Hashable, CustomStringConvertible {
    /// A Unix domain socket at this path.
    case unix(path: String)
    /// A TCP listener at an IPv4 address (or `localhost`) and port.
    case tcp(host: String, port: Int)

    /// Parses `--unix PATH` / `--tcp HOST:PORT` values: `unix:PATH`, `tcp:HOST:PORT`, or a bare `HOST:PORT`.
    package init?(_ text: String) {
        if text.hasPrefix("unix:") {
            self = .unix(path: String(text.dropFirst(5)))
            return
        }
        let address = text.hasPrefix("tcp:") ? String(text.dropFirst(4)) : text
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]),
            (1...65_535).contains(port)
        else { return nil }
        self = .tcp(host: String(address[..<colon]), port: port)
    }

    package var description: String {
        switch self {
        case .unix(let path): return "unix:\(path)"
        case .tcp(let host, let port): return "tcp:\(host):\(port)"
        }
    }
}

/// Why a socket operation failed.
package struct GatewaySocketError: Error, CustomStringConvertible {
    /// What failed, with `strerror` of the cause.
    package var description: String

    init(_ what: String, errno code: Int32 = errno) {
        self.description = "\(what): \(String(cString: strerror(code)))"
    }
}

/// A non-blocking stream socket to a gateway, for bytes no well-behaved client sends. One thread uses it.
package final class GatewaySocket {
    /// What a write or read found.
    package enum Outcome: Sendable, Equatable {
        /// Everything was written (or everything readable was read) and the connection is open.
        case open
        /// The gateway closed the connection (end of stream, reset, broken pipe).
        case closed
        /// The gateway neither took nor sent bytes before the deadline.
        case timedOut
    }

    private var fd: Int32
    private let isTCP: Bool

    /// Connects to `endpoint` (blocking, at most `timeoutSeconds`), then makes the socket non-blocking.
    package init(_ endpoint: GatewayEndpoint, timeoutSeconds: Double) throws(GatewaySocketError) {
        switch endpoint {
        case .unix(let path):
            self.isTCP = false
            self.fd = socket(AF_UNIX, Self.streamType, 0)
            guard self.fd >= 0 else { throw GatewaySocketError("socket") }
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let bytes = Array(path.utf8)
            guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
                systemClose(self.fd)
                throw GatewaySocketError("socket path too long", errno: ENAMETOOLONG)
            }
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                raw.copyBytes(from: bytes)
                raw[bytes.count] = 0
            }
            try self.connect(to: &address, timeoutSeconds: timeoutSeconds)
        case .tcp(let host, let port):
            self.isTCP = true
            self.fd = socket(AF_INET, Self.streamType, 0)
            guard self.fd >= 0 else { throw GatewaySocketError("socket") }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port)).bigEndian
            guard inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host, &address.sin_addr) == 1 else {
                systemClose(self.fd)
                throw GatewaySocketError("not an IPv4 address: \(host)", errno: EINVAL)
            }
            try self.connect(to: &address, timeoutSeconds: timeoutSeconds)
            var noDelay: Int32 = 1
            setsockopt(self.fd, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
        }
        #if canImport(Darwin)
        var noSigPipe: Int32 = 1
        setsockopt(self.fd, SOL_SOCKET, SO_NOSIGPIPE, &noSigPipe, socklen_t(MemoryLayout<Int32>.size))
        #endif
        _ = fcntl(self.fd, F_SETFL, fcntl(self.fd, F_GETFL) | O_NONBLOCK)
    }

    deinit { self.close() }

    #if canImport(Glibc)
    private static let streamType = Int32(SOCK_STREAM.rawValue)
    private static let sendFlags = Int32(MSG_NOSIGNAL)
    #else
    private static let streamType = SOCK_STREAM
    private static let sendFlags: Int32 = 0
    #endif

    private func connect<Address>(to address: inout Address, timeoutSeconds: Double) throws(GatewaySocketError) {
        var timeout = timeval(tv_sec: Int(timeoutSeconds), tv_usec: 0)
        setsockopt(self.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let size = socklen_t(MemoryLayout<Address>.size)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { systemConnect(self.fd, $0, size) }
        }
        guard result == 0 else {
            let error = GatewaySocketError("connect")
            self.close()
            throw error
        }
    }

    /// Whether the socket is still open on this side.
    package var isOpen: Bool { self.fd >= 0 }

    /// Writes all of `bytes`, reading into `received` whenever the gateway is not taking bytes (so that a gateway
    /// that waits for its answers to be read never waits for this writer); gives up at `deadline`.
    package func write(_ bytes: [UInt8], received: inout [UInt8], deadline: Double) -> Outcome {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes {
                send(self.fd, $0.baseAddress! + offset, bytes.count - offset, Self.sendFlags)
            }
            if written > 0 {
                offset += written
                continue
            }
            if written < 0, errno == EINTR { continue }
            guard written < 0, errno == EAGAIN || errno == EWOULDBLOCK else { return .closed }
            if self.read(into: &received) == .closed { return .closed }
            let remaining = deadline - monotonicSeconds()
            if remaining <= 0 { return .timedOut }
            _ = self.poll(events: Int16(POLLOUT | POLLIN), milliseconds: Int32(min(remaining, 0.1) * 1000) + 1)
        }
        return .open
    }

    /// Reads everything readable now into `received`.
    @discardableResult
    package func read(into received: inout [UInt8]) -> Outcome {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(self.fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                received.append(contentsOf: chunk[0..<count])
                continue
            }
            if count < 0, errno == EINTR { continue }
            if count < 0, errno == EAGAIN || errno == EWOULDBLOCK { return .open }
            return .closed
        }
    }

    /// Waits until bytes are readable (or the gateway closed), at most until `deadline`.
    package func waitReadable(deadline: Double) -> Bool {
        while true {
            let remaining = deadline - monotonicSeconds()
            if remaining <= 0 { return false }
            if self.poll(events: Int16(POLLIN), milliseconds: Int32(min(remaining, 1) * 1000) + 1) { return true }
        }
    }

    private func poll(events: Int16, milliseconds: Int32) -> Bool {
        var descriptor = pollfd(fd: self.fd, events: events, revents: 0)
        return systemPoll(&descriptor, milliseconds) > 0
    }

    /// Shuts down the sending side: the gateway sees the end of the stream.
    package func shutdownWrite() {
        if self.fd >= 0 { shutdown(self.fd, Int32(SHUT_WR)) }
    }

    /// Closes the socket; with `reset`, a TCP socket is reset (no TIME_WAIT on this side, an RST on the gateway's).
    package func close(reset: Bool = false) {
        guard self.fd >= 0 else { return }
        if reset || self.isTCP {
            // Many short connections: without the reset each would hold a local port in TIME_WAIT for a minute.
            var linger = linger(l_onoff: 1, l_linger: 0)
            setsockopt(self.fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<linger>.size))
        }
        systemClose(self.fd)
        self.fd = -1
    }
}

/// Seconds on the monotonic clock.
package func monotonicSeconds() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

// The C functions whose names this file's methods reuse.
private func systemClose(_ fd: Int32) {
    #if canImport(Glibc)
    _ = Glibc.close(fd)
    #else
    _ = Darwin.close(fd)
    #endif
}

private func systemConnect(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ size: socklen_t) -> Int32 {
    #if canImport(Glibc)
    Glibc.connect(fd, address, size)
    #else
    Darwin.connect(fd, address, size)
    #endif
}

private func systemPoll(_ descriptor: inout pollfd, _ milliseconds: Int32) -> Int32 {
    #if canImport(Glibc)
    Glibc.poll(&descriptor, 1, milliseconds)
    #else
    Darwin.poll(&descriptor, 1, milliseconds)
    #endif
}
