#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// A listening socket whose connections are accepted on a thread of the listener's own and handed to NIO with their
/// descriptors known.
///
/// NIO's `ServerBootstrap` does not tell a child channel its socket descriptor; the gateway needs it so that a
/// connection can write to its socket directly while NIO holds none of its output (see ``DirectSocketWriter``): a
/// push fanned out to thousands of idle connections then costs one `send` each instead of a trip through NIO's
/// pipeline and write queue per connection. Accepted sockets become channels through
/// `ClientBootstrap.withConnectedSocket`, on the group's loops in turn, and are NIO channels like any other from then
/// on (reads, close, errors).
final class SocketListener: Sendable {
    /// The listening descriptor (non-blocking, close-on-exec).
    private let descriptor: CInt
    /// The read end of the pipe that wakes the accept thread for ``stop()``.
    private let wakeDescriptor: CInt
    /// Its write end.
    private let wakeWriteDescriptor: CInt
    private let stopped = Mutex<(done: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))
    private let stopRequested = Atomic<Bool>(false)
    /// Whether the accept thread runs (it closes the descriptors when it ends; otherwise `deinit` does).
    private let started = Atomic<Bool>(false)
    /// The pause after a hand-over (see `acceptLoop`).
    static let coalescingMicroseconds: UInt32 = 500
    /// Most connections handed over at once.
    static let maxBatch = 256
    /// The address it listens on (the port the kernel chose for port 0).
    let localAddress: SocketAddress

    private init(descriptor: CInt, localAddress: SocketAddress) throws {
        var wake: [CInt] = [-1, -1]
        guard pipe(&wake) == 0 else {
            let error = errno
            close(descriptor)
            throw GatewayStartError(description: "pipe: \(String(cString: strerror(error)))")
        }
        for end in wake { Self.setCloseOnExec(end) }
        self.descriptor = descriptor
        self.wakeDescriptor = wake[0]
        self.wakeWriteDescriptor = wake[1]
        self.localAddress = localAddress
    }

    deinit {
        if !self.started.load(ordering: .sequentiallyConsistent) {
            close(self.descriptor)
            close(self.wakeDescriptor)
            close(self.wakeWriteDescriptor)
        }
    }

    /// Listens on TCP `host`:`port` (port 0: any free port).
    static func tcp(host: String, port: Int, backlog: CInt) throws -> SocketListener {
        let address = try SocketAddress.makeAddressResolvingHost(host, port: port)
        let family = address.protocol == .inet6 ? AF_INET6 : AF_INET
        let fd = try Self.socket(family: family)
        var one: CInt = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<CInt>.size))
        try Self.bindAndListen(fd, address, backlog: backlog, what: "\(host):\(port)")
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else {
            let error = errno
            close(fd)
            throw GatewayStartError(description: "getsockname: \(String(cString: strerror(error)))")
        }
        let bound: SocketAddress
        if family == AF_INET6 {
            bound = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { SocketAddress($0.pointee, host: host) }
            }
        } else {
            bound = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { SocketAddress($0.pointee, host: host) }
            }
        }
        return try SocketListener(descriptor: fd, localAddress: bound)
    }

    /// Listens on the Unix socket `path` (which must not exist), a file with permissions `mode`.
    ///
    /// The file is created with the process's umask and set to `mode` before the socket listens, so nobody can
    /// connect in between (a connection before `listen` is refused).
    static func unix(path: String, mode: UInt32, backlog: CInt) throws -> SocketListener {
        let address = try SocketAddress(unixDomainSocketPath: path)
        let fd = try Self.socket(family: AF_UNIX)
        try Self.bindAndListen(fd, address, backlog: backlog, what: path) {
            guard chmod(path, mode_t(mode)) == 0 else {
                throw GatewayStartError(description: "chmod \(path): \(String(cString: strerror(errno)))")
            }
        }
        return try SocketListener(descriptor: fd, localAddress: address)
    }

    private static func socket(family: CInt) throws -> CInt {
        let fd = Glibc.socket(family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw GatewayStartError(description: "socket: \(String(cString: strerror(errno)))") }
        Self.setNonBlocking(fd)
        Self.setCloseOnExec(fd)
        return fd
    }

    private static func setNonBlocking(_ fd: CInt) {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }

    private static func setCloseOnExec(_ fd: CInt) {
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    }

    private static func bindAndListen(
        _ fd: CInt, _ address: SocketAddress, backlog: CInt, what: String, afterBind: () throws -> Void = {}
    ) throws {
        let bound = address.withSockAddr { bind(fd, $0, socklen_t($1)) }
        guard bound == 0 else {
            let error = errno
            close(fd)
            throw GatewayStartError(description: "cannot listen on \(what): \(String(cString: strerror(error)))")
        }
        do {
            try afterBind()
        } catch {
            close(fd)
            throw error
        }
        guard listen(fd, backlog) == 0 else {
            let error = errno
            close(fd)
            throw GatewayStartError(description: "cannot listen on \(what): \(String(cString: strerror(error)))")
        }
    }

    /// Starts the accept thread: the sockets accepted at each wake-up (close-on-exec; NIO makes them non-blocking)
    /// go to `accepted` together, on that thread, so that a burst of connections costs one hand-over to the event
    /// loops, not one per connection. Accepting stops at ``stop()``, which closes the listening socket.
    func start(logger: Logger, accepted: @escaping @Sendable ([CInt]) -> Void) {
        guard !self.started.exchange(true, ordering: .sequentiallyConsistent) else { return }
        Thread.spawn(name: "switchboard-accept") { self.acceptLoop(logger: logger, accepted: accepted) }
    }

    /// Stops accepting and closes the listening socket; connections already accepted are not affected.
    func stop() {
        guard !self.stopRequested.exchange(true, ordering: .sequentiallyConsistent) else { return }
        var byte: UInt8 = 1
        _ = write(self.wakeWriteDescriptor, &byte, 1)
    }

    /// Returns once the accept thread has ended and the listening socket is closed.
    func waitUntilStopped() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = self.stopped.withLock { state -> Bool in
                if !state.done { state.waiters.append(continuation) }
                return state.done
            }
            if done { continuation.resume() }
        }
    }

    private func acceptLoop(logger: Logger, accepted: @Sendable ([CInt]) -> Void) {
        var polled = [
            pollfd(fd: self.descriptor, events: Int16(POLLIN), revents: 0),
            pollfd(fd: self.wakeDescriptor, events: Int16(POLLIN), revents: 0),
        ]
        var failing = false
        while !self.stopRequested.load(ordering: .sequentiallyConsistent) {
            let ready = poll(&polled, nfds_t(polled.count), -1)
            if ready < 0 {
                if errno == EINTR { continue }
                logger.error("accept loop: poll failed", metadata: ["error": "\(String(cString: strerror(errno)))"])
                break
            }
            // Take every waiting connection (up to a batch), hand them over, then wait again. After a hand-over the
            // thread pauses briefly before it waits: in a burst of connections the next wake-up then finds several
            // (each wake-up of this thread and of an event loop costs more than the connection's own set-up), and
            // the first connection of a burst is not delayed.
            var batch: [CInt] = []
            defer {
                if !batch.isEmpty {
                    accepted(batch)
                    usleep(Self.coalescingMicroseconds)
                }
            }
            while !self.stopRequested.load(ordering: .relaxed), batch.count < Self.maxBatch {
                let fd = accept(self.descriptor, nil, nil)
                if fd >= 0 {
                    failing = false
                    Self.setCloseOnExec(fd)
                    batch.append(fd)
                    continue
                }
                let error = errno
                if error == EAGAIN || error == EWOULDBLOCK { break }
                if error == EINTR || error == ECONNABORTED || error == EPROTO { continue }
                // Out of descriptors (EMFILE, ENFILE) or memory: the connection stays queued; try again shortly
                // rather than spin on a listening socket that stays readable. Logged once per spell of failures.
                if !failing {
                    logger.warning("accept failed", metadata: ["error": "\(String(cString: strerror(error)))"])
                    failing = true
                }
                usleep(10_000)
                break
            }
        }
        close(self.descriptor)
        close(self.wakeDescriptor)
        close(self.wakeWriteDescriptor)
        let waiters = self.stopped.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.done = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

extension Thread {
    /// Runs `body` on a new detached thread named `name`.
    fileprivate static func spawn(name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread { body() }
        thread.name = name
        thread.start()
    }
}
