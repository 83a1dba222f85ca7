#if canImport(Glibc)
import Glibc
#endif

/// A TCP socket bound to 127.0.0.1 on a port the kernel chose, and not listening: while it is open, connecting to the
/// port is refused and nobody else can take the port; closing it (``close()`` or release) frees the port.
public final class BoundLoopbackSocket: Sendable {
    /// The socket.
    public let descriptor: Int32
    /// The port it is bound to.
    public let port: Int

    /// The socket could not be made or bound.
    public struct BindError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Binds a new socket.
    /// - Throws: ``BindError`` with the system's reason.
    public init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw BindError(description: "socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                bind(descriptor, generic, length) == 0 && getsockname(descriptor, generic, &length) == 0
            }
        }
        guard bound else {
            let reason = String(cString: strerror(errno))
            Glibc.close(descriptor)
            throw BindError(description: "bind: \(reason)")
        }
        self.descriptor = descriptor
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { Glibc.close(self.descriptor) }

    /// A loopback port nothing listened on a moment ago (bound, then freed at once).
    public static func freePort() throws -> Int {
        try BoundLoopbackSocket().port
    }
}

/// A blocking TCP connection to `127.0.0.1:port` with 200 ms send and receive timeouts, for tests that speak raw
/// bytes; its descriptor, which the caller closes.
/// - Throws: ``BoundLoopbackSocket/BindError`` when the connection is refused.
public func connectedLoopbackSocket(port: Int) throws -> Int32 {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port)).bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard result == 0 else {
        Glibc.close(descriptor)
        throw BoundLoopbackSocket.BindError(description: "connect: \(String(cString: strerror(errno)))")
    }
    var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    return descriptor
}
