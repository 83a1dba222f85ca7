import ArgumentParser
#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOPosix
import SwitchboardRedis
import SwitchboardWire

/// A subscriber connection of the fan-out scenarios: a plain socket that logs in and subscribes with blocking writes
/// and reads before the measurement, then is made non-blocking and read by the ``FanoutReader``.
///
/// Connections open a window of ``window`` at a time: each connects and writes its whole handshake at once (HELLO
/// and the subscribe requests right behind it, as the protocol allows, SPEC.md [SB-5.1-6]; or Redis SUBSCRIBE),
/// then each reads and checks its answers (WELCOME first, then a response to every request), so the server works on
/// a window while the answers are read.
struct RawSubscriber: Sendable {
    let descriptor: Int32
    /// Bytes read past the last answer (the start of a push), the first bytes the reader gets.
    var leftover: [UInt8] = []
    /// WELCOME.heartbeatMs; 0 for Redis.
    var heartbeatMs: UInt64 = 0
    /// The last request id used on the connection.
    var lastRequestID: UInt32 = 0
    /// When the handshake was written (`CLOCK_MONOTONIC`): the last the server heard from the connection.
    var handshakeSentAt: UInt64 = 0

    static let window = 256
    /// How long a blocking read or write may wait before the setup gives up.
    static let timeoutSeconds = 10

    /// Opens `count` Switchboard connections, logs user `user(i)` in on connection i (HELLO as ``BenchClient``
    /// sends it) and sends `requests` on each; `check` throws for a response that means the subscription failed.
    ///
    /// With `webSocket`, each connection is upgraded to WebSocket first and its frames travel in binary messages
    /// (the bytes read past the answers, ``leftover``, are then WebSocket messages again, as the reader reads them).
    static func openSwitchboard(
        _ count: Int, target: BenchTarget, webSocket: WebSocketUpgrade? = nil, user: @escaping @Sendable (Int) -> String,
        requests: [Request], check: @escaping @Sendable (BenchResponse) throws -> Void
    ) async throws -> [RawSubscriber] {
        let address = try target.socketAddress()
        var ping = ByteBuffer()
        FrameEncoder().encode(.control(.ping(Ping(nonce: 1))), into: &ping)
        let keepAlive = webSocket == nil ? ping : ByteBuffer(bytes: WebSocketFraming.clientMessage(ping.readableBytesView))
        return try await NIOThreadPool.singleton.runIfActive {
            try Self.open(count, address: address, webSocket: webSocket, keepAlive: keepAlive) { index in
                var frames = ByteBuffer()
                let encoder = FrameEncoder()
                encoder.encode(.control(.hello(Hello(protocolVersion: 1, userId: user(index), clientName: SwitchboardVersion.productName("sbbench")))), into: &frames)
                for (offset, request) in requests.enumerated() {
                    encoder.encode(.request(id: UInt32(offset + 1), request), into: &frames)
                }
                return frames
            } receive: { subscriber, buffer in
                try subscriber.awaitWelcome(&buffer, user: user(subscriber.index))
                try subscriber.awaitResponses(to: UInt32(1)...UInt32(requests.count), &buffer, check: check)
            }
        }
    }

    /// Opens `count` Redis connections and SUBSCRIBEs each to `channel`.
    static func openRedis(_ count: Int, target: BenchTarget, channel: String) async throws -> [RawSubscriber] {
        let address = try target.socketAddress()
        return try await NIOThreadPool.singleton.runIfActive {
            try Self.open(count, address: address) { _ in
                var command = ByteBuffer()
                command.writeRESPCommand(["SUBSCRIBE", channel] as [String])
                return command
            } receive: { subscriber, buffer in
                var reply: RESPToken?
                while reply == nil {
                    do { reply = try RESPToken(consuming: &buffer) } catch { throw BenchFailure("\(error)") }
                    if reply == nil { try subscriber.readMore(into: &buffer) }
                }
                guard let reply, reply.array?.first?.string == "subscribe" else {
                    throw BenchFailure("SUBSCRIBE was answered with \(reply.map { "\($0)" } ?? "nothing")")
                }
            }
        }
    }

    /// Sends `request` on every open connection, then reads each one's response (the reader must have stopped;
    /// `leftovers` are its partial frames). Pushes on the way are passed over; a connection that does not answer
    /// within the timeout is left alone. Returns the responses, in subscriber order (nil: no answer).
    static func exchange(_ request: Request, on subscribers: [RawSubscriber], stopped leftovers: [[UInt8]], isOpen: [Bool]) async -> [BenchResponse?] {
        await (try? NIOThreadPool.singleton.runIfActive {
            var open: [(subscriber: Blocking, id: UInt32)] = []
            for (index, subscriber) in subscribers.enumerated() where isOpen[index] {
                let blocking = Blocking(descriptor: subscriber.descriptor, index: index)
                guard (try? blocking.setBlocking(true)) != nil else { continue }
                let id = subscriber.lastRequestID + 1
                var frame = ByteBuffer()
                FrameEncoder().encode(.request(id: id, request), into: &frame)
                guard (try? blocking.write(frame)) != nil else { continue }
                open.append((blocking, id))
            }
            var responses = [BenchResponse?](repeating: nil, count: subscribers.count)
            for (subscriber, id) in open {
                var buffer = ByteBuffer(bytes: leftovers[subscriber.index])
                try? subscriber.awaitResponses(to: id...id, &buffer) { responses[subscriber.index] = $0 }
            }
            return responses
        }) ?? []
    }

    /// Closes the connections.
    static func close(_ subscribers: [RawSubscriber]) {
        for subscriber in subscribers { _ = Glibc.close(subscriber.descriptor) }
    }

    /// Connects `count` sockets, a window at a time: writes `hello(i)` on each of a window, then lets `receive` read
    /// each one's answers; every socket is non-blocking at the end. Closes them all when one fails.
    ///
    /// - Parameter keepAlive: Sent every half second to the subscribers already open while the others are still
    ///   being opened (a gateway that cuts silent sessions would otherwise close the first ones before the reader
    ///   takes over their keep-alive); the reader reads the answers later with everything else.
    private static func open(
        _ count: Int, address: SocketAddress, webSocket: WebSocketUpgrade? = nil, keepAlive: ByteBuffer? = nil,
        hello: (Int) -> ByteBuffer, receive: (Blocking, inout ByteBuffer) throws -> Void
    ) throws -> [RawSubscriber] {
        var opened: [RawSubscriber] = []
        opened.reserveCapacity(count)
        var lastKeepAlive = monotonicNanoseconds()
        do {
            while opened.count < count {
                if let keepAlive, monotonicNanoseconds() - lastKeepAlive >= 500_000_000 {
                    for subscriber in opened {
                        // Non-blocking by now; a PING that does not fit the socket buffer is not needed.
                        _ = keepAlive.withUnsafeReadableBytes {
                            send(subscriber.descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                        }
                    }
                    lastKeepAlive = monotonicNanoseconds()
                }
                let window = opened.count..<min(opened.count + Self.window, count)
                var sockets: [Blocking] = []
                for index in window {
                    let socket = try Blocking.connect(to: address, index: index)
                    opened.append(RawSubscriber(descriptor: socket.descriptor, handshakeSentAt: monotonicNanoseconds()))
                    sockets.append(socket)
                    if let webSocket { try socket.upgrade(webSocket) }
                    try socket.write(hello(index))
                }
                for (index, socket) in zip(window, sockets) {
                    var buffer = ByteBuffer()
                    try receive(socket, &buffer)
                    opened[index].leftover = socket.leftover(buffer)
                    opened[index].heartbeatMs = socket.heartbeatMs
                    opened[index].lastRequestID = socket.lastRequestID
                    try socket.setBlocking(false)
                }
            }
        } catch {
            Self.close(opened)
            throw error
        }
        return opened
    }
}

/// Where a subscriber upgrades its connection to WebSocket (`--transport websocket`).
struct WebSocketUpgrade: Sendable, Equatable {
    /// The Host header's value.
    var host: String
    /// The path of the gateway's WebSocket listener.
    var path: String
}

/// A socket in blocking mode (with timeouts), during the handshake and the goodbye.
private final class Blocking {
    let descriptor: Int32
    let index: Int
    /// Whether the connection was upgraded to WebSocket: writes are sent as client messages, and reads are
    /// unwrapped from the server's messages.
    private var webSocket = false
    /// On WebSocket, bytes read that do not make a whole server message yet.
    private var raw = ByteBuffer()
    private var decoder = FrameDecoder(direction: .serverToClient)
    private(set) var heartbeatMs: UInt64 = 0
    private(set) var lastRequestID: UInt32 = 0

    init(descriptor: Int32, index: Int) {
        self.descriptor = descriptor
        self.index = index
    }

    /// A new socket connected to `address`, blocking, with send and receive timeouts.
    static func connect(to address: SocketAddress, index: Int) throws -> Blocking {
        let descriptor = socket(address.protocol.rawValue, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw BenchFailure("socket: \(String(cString: strerror(errno)))") }
        var timeout = timeval(tv_sec: RawSubscriber.timeoutSeconds, tv_usec: 0)
        _ = setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if address.protocol != .unix {
            var on: Int32 = 1
            _ = setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
        }
        let result = address.withSockAddr { Glibc.connect(descriptor, $0, socklen_t($1)) }
        guard result == 0 else {
            let reason = String(cString: strerror(errno))
            _ = Glibc.close(descriptor)
            throw BenchFailure("connecting subscriber \(index) to \(address) failed: \(reason)")
        }
        return Blocking(descriptor: descriptor, index: index)
    }

    func setBlocking(_ blocking: Bool) throws {
        let flags = fcntl(self.descriptor, F_GETFL)
        let wanted = blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK
        guard flags >= 0, fcntl(self.descriptor, F_SETFL, wanted) == 0 else {
            throw BenchFailure("fcntl: \(String(cString: strerror(errno)))")
        }
    }

    /// Upgrades the connection to WebSocket: sends the request, reads the answer's header (101, or the run fails
    /// with the status line) and keeps what follows it for the next reads.
    func upgrade(_ upgrade: WebSocketUpgrade) throws {
        try self.send(WebSocketFraming.upgradeRequest(host: upgrade.host, path: upgrade.path))
        var answer = ByteBuffer()
        while true {
            let view = answer.readableBytesView
            if let end = view.indices.first(where: { view[$0...].starts(with: [13, 10, 13, 10]) }) {
                let header = String(decoding: view[..<end], as: UTF8.self)
                guard header.hasPrefix("HTTP/1.1 101") else {
                    throw BenchFailure("subscriber \(self.index): the WebSocket upgrade was answered with \(header.split(separator: "\r\n").first ?? "")")
                }
                answer.moveReaderIndex(to: end + 4)
                self.raw = answer
                self.webSocket = true
                return
            }
            try self.readRaw(into: &answer)
        }
    }

    /// The bytes read past the last answer, as the reader gets them: frames, or on WebSocket the messages they came
    /// in (the rest of `buffer` as one message, then what does not make a whole message yet).
    func leftover(_ buffer: ByteBuffer) -> [UInt8] {
        guard self.webSocket else { return Array(buffer.readableBytesView) }
        let rest = Array(buffer.readableBytesView)
        return (rest.isEmpty ? [] : WebSocketFraming.serverMessage(rest)) + Array(self.raw.readableBytesView)
    }

    func write(_ buffer: ByteBuffer) throws {
        try self.send(self.webSocket ? ByteBuffer(bytes: WebSocketFraming.clientMessage(buffer.readableBytesView)) : buffer)
    }

    private func send(_ buffer: ByteBuffer) throws {
        try buffer.withUnsafeReadableBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.send(self.descriptor, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
                if written < 0, errno == EINTR { continue }
                guard written > 0 else {
                    throw BenchFailure("subscriber \(self.index): write failed: \(String(cString: strerror(errno)))")
                }
                offset += written
            }
        }
    }

    /// Appends what one read returns (on WebSocket: the payloads of the messages completed); a closed connection or
    /// a timeout is an error.
    func readMore(into buffer: inout ByteBuffer) throws {
        guard self.webSocket else { return try self.readRaw(into: &buffer) }
        let before = buffer.readableBytes
        while true {
            guard WebSocketFraming.unwrap(&self.raw, into: &buffer) else {
                throw BenchFailure("subscriber \(self.index): the server closed the WebSocket connection")
            }
            if buffer.readableBytes > before { return }
            try self.readRaw(into: &self.raw)
        }
    }

    private func readRaw(into buffer: inout ByteBuffer) throws {
        while true {
            var result = 0
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: 16 << 10) { space in
                result = Glibc.read(self.descriptor, space.baseAddress, space.count)
                return max(result, 0)
            }
            if result > 0 { return }
            if result < 0, errno == EINTR { continue }
            let reason =
                result == 0 ? "the server closed the connection"
                : errno == EAGAIN || errno == EWOULDBLOCK ? "no answer within \(RawSubscriber.timeoutSeconds) s"
                : String(cString: strerror(errno))
            throw BenchFailure("subscriber \(self.index): \(reason)")
        }
    }

    /// The next frame, reading as needed; a PING on the way is answered.
    func nextFrame(_ buffer: inout ByteBuffer) throws -> Frame {
        while true {
            let frame: Frame?
            do { frame = try self.decoder.decodeFrame(from: &buffer) } catch { throw BenchFailure("subscriber \(self.index): \(error)") }
            if let frame { return frame }
            try self.readMore(into: &buffer)
        }
    }

    /// Reads WELCOME, the answer to HELLO (a GOAWAY or anything else fails).
    func awaitWelcome(_ buffer: inout ByteBuffer, user: String) throws {
        let frame = try self.nextFrame(&buffer)
        guard case .control(.welcome(let welcome))? = try? SwitchboardMessage.decode(frame) else {
            let message = (try? SwitchboardMessage.decode(frame)).map { "\($0)" } ?? "an undecodable frame"
            throw BenchFailure("the login of \(user) was answered with \(message)")
        }
        self.heartbeatMs = welcome.heartbeatMs
    }

    /// Reads until each request of `ids` has its response and hands each to `check`; pushes are passed over, a PING
    /// is answered, a GOAWAY fails.
    func awaitResponses(
        to ids: ClosedRange<UInt32>, _ buffer: inout ByteBuffer, check: (BenchResponse) throws -> Void
    ) throws {
        var missing = Set(ids)
        while !missing.isEmpty {
            let frame = try self.nextFrame(&buffer)
            switch frame.header.kind {
            case .response where missing.remove(frame.header.requestID) != nil:
                try check(BenchResponse(frame: frame, sentAt: 0, receivedAt: 0))
            case .control where frame.header.op == ControlOp.ping.rawValue:
                guard case .control(.ping(let ping))? = try? SwitchboardMessage.decode(frame) else { continue }
                var pong = ByteBuffer()
                FrameEncoder().encode(.control(.pong(Pong(nonce: ping.nonce))), into: &pong)
                try self.write(pong)
            case .control where frame.header.op == ControlOp.goAway.rawValue:
                let message = (try? SwitchboardMessage.decode(frame)).map { "\($0)" } ?? "GOAWAY"
                throw BenchFailure("subscriber \(self.index) was sent away: \(message)")
            default:
                continue
            }
        }
        self.lastRequestID = max(self.lastRequestID, ids.upperBound)
    }
}

extension BenchTarget {
    /// The target's address (a host name is resolved).
    func socketAddress() throws -> SocketAddress {
        switch self {
        case .tcp(let host, let port): return try SocketAddress.makeAddressResolvingHost(host, port: port)
        case .tlsTCP: throw ValidationError("raw-socket subscribers do not speak TLS")
        case .unix(let path): return try SocketAddress(unixDomainSocketPath: path)
        }
    }
}
