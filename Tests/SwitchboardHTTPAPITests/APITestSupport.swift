import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import SwitchboardClient
@testable import SwitchboardHTTPAPI
@testable import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWebhooks
import SwitchboardWire
import Synchronization
import Testing

/// The package's root directory and its files.
enum Repository {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func path(_ relative: String) -> String { Self.root.appendingPathComponent(relative).path }

    static func text(_ relative: String) throws -> String { try String(contentsOfFile: Self.path(relative), encoding: .utf8) }

    /// A product `swift build --build-tests` put next to the test bundle (`switchboard`).
    static func executable(_ name: String) -> String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name).path
    }
}

/// Tokens of the test gateways' secret.
enum APITokens {
    static let secret = Array("http-api-test-secret-0123456789abcdef".utf8)
    static let authority = TokenAuthority(secret: secret)
    static var now: Int64 { Int64(Date().timeIntervalSince1970) }

    static func token(_ user: String, role: SessionRole = .user, expiresIn: Int64 = 3600, jti: String? = nil) -> String {
        Self.authority.mint(userID: user, expiresAt: Self.now + expiresIn, role: role, tokenID: jti, issuedAt: Self.now - 5)
    }

    /// The API key the tests call with, and its name (the user its requests run as).
    static let keyName = "backend"
    static let keySecret = "sk_test_0123456789abcdefghij"
    static let keys = try! APIKeys(parsing: "# test keys\n\(keyName) \(keySecret)\nother sk_other_0123456789abcdef\n")
}

/// A running gateway with every area, tokens, and the HTTP API on a loopback port.
struct APIGateway: Sendable {
    /// The wire listener.
    var tcpPort: Int
    /// The API listener.
    var api: SocketAddress
    var running: GatewayApplication.Running

    /// A wire client of `user` logging in with a token of `role`.
    func connect(_ user: String, role: SessionRole = .user, device: String = "") async throws -> SwitchboardConnection {
        var configuration = ClientConfiguration(
            endpoint: .tcp(host: "127.0.0.1", port: self.tcpPort), userID: user, token: APITokens.token(user, role: role))
        configuration.deviceID = device
        return try await SwitchboardConnection.connect(configuration)
    }

    /// `POST path` with `body` and `Authorization: Bearer credential` (nil: no header).
    func post(_ path: String, _ body: String, credential: String? = APITokens.keySecret) async throws -> HTTPAnswer {
        try await LoopbackHTTP.request(
            "POST", path, to: self.api, body: Array(body.utf8),
            headers: credential.map { [("Authorization", "Bearer \($0)")] } ?? [])
    }

    /// Runs `op` with `body` over the API.
    func call(_ op: String, _ body: String, credential: String? = APITokens.keySecret) async throws -> HTTPAnswer {
        try await self.post("/v1/" + op, body, credential: credential)
    }
}

/// Runs `body` against a gateway with every area in memory, tokens of ``APITokens/secret`` (every user may read,
/// write and join any channel and their own data), and the HTTP API with ``APITokens/keys``.
func withAPIGateway<T: Sendable>(
    keys: APIKeys = APITokens.keys, secret: [UInt8]? = APITokens.secret,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    webhooks: WebhookDispatcher? = nil,
    _ body: @Sendable (APIGateway) async throws -> T
) async throws -> T {
    var server = ServerConfiguration()
    server.tcpHost = "127.0.0.1"
    server.tcpPort = 0
    server.unixSocketPath = nil
    server.shutdownGracePeriod = .seconds(2)
    server.tokenSecret = secret
    server.defaultGrants = try GrantSet(
        jsonText: #"[{"on":"message:*","allow":["read","write","presence"]},"#
            + #"{"on":"user:{user}","allow":["read","write","presence","publish","profileWrite"]}]"#)
    configure(&server)
    var configuration = GatewayApplication.Configuration(server: server)
    configuration.areas = .all
    configuration.inMemory = true
    configuration.presence.presenceTimeout = .seconds(5)
    configuration.eventGracePeriod = .milliseconds(200)
    configuration.webhooks = webhooks
    var logger = Logger(label: "test-api-gateway")
    logger.logLevel = .critical
    let (apiStream, apiSink) = AsyncStream<SocketAddress>.makeStream()
    let (runningStream, runningSink) = AsyncStream<GatewayApplication.Running>.makeStream()
    var api = HTTPAPI.Configuration(host: "127.0.0.1", port: 0, keys: keys)
    api.onRunning = { apiSink.yield($0) }
    api.webhooks = webhooks
    let application = GatewayApplication(
        configuration: configuration, addOns: [HTTPAPI(configuration: api)], logger: logger,
        onServerRunning: { runningSink.yield($0) })
    let group = ServiceGroup(configuration: .init(services: [application], logger: logger))
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask {
            defer {
                runningSink.finish()
                apiSink.finish()
            }
            try await group.run()
        }
        var runningIterator = runningStream.makeAsyncIterator()
        var apiIterator = apiStream.makeAsyncIterator()
        guard let running = await runningIterator.next(), let address = await apiIterator.next() else {
            try await tasks.waitForAll()
            throw CancellationError()
        }
        do {
            let gateway = APIGateway(tcpPort: running.addresses.tcp?.port ?? 0, api: address, running: running)
            let result = try await body(gateway)
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return result
        } catch {
            await group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
            throw error
        }
    }
}

/// An HTTP answer.
struct HTTPAnswer: Sendable, CustomStringConvertible {
    var status: Int
    /// Header names in lower case.
    var headers: [String: String]
    var body: String

    /// The body as JSON.
    var json: JSONValue {
        get throws { try JSONValue.parse(self.body) }
    }

    /// The `code` and `name` of an error answer.
    var error: (code: UInt64, name: String)? {
        guard let json = try? self.json, let code = json["code"]?.uint64Value, let name = json["name"]?.stringValue else {
            return nil
        }
        return (code, name)
    }

    var description: String { "\(self.status) \(self.body)" }
}

/// A plain HTTP/1.1 request over loopback TCP (a new connection each), read until the response's Content-Length is
/// complete.
enum LoopbackHTTP {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func request(
        _ method: String, _ path: String, to address: SocketAddress, body: [UInt8] = [], headers: [(String, String)] = [],
        tls: NIOSSLContext? = nil
    ) async throws -> HTTPAnswer {
        let promise = MultiThreadedEventLoopGroup.singleton.next().makePromise(of: HTTPAnswer.self)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: nil))
                    }
                    try channel.pipeline.syncOperations.addHandler(ResponseReader(promise: promise, head: method == "HEAD"))
                }
            }
            .connect(to: address).get()
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" {
            head += "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n"
        }
        var buffer = ByteBuffer(string: head + "\r\n")
        buffer.writeBytes(body)
        try await channel.writeAndFlush(buffer)
        defer { channel.close(promise: nil) }
        return try await promise.futureResult.get()
    }

    private final class ResponseReader: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private let promise: EventLoopPromise<HTTPAnswer>
        private let head: Bool
        private var received: [UInt8] = []
        private var done = false

        init(promise: EventLoopPromise<HTTPAnswer>, head: Bool) {
            self.promise = promise
            self.head = head
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var buffer = self.unwrapInboundIn(data)
            self.received += buffer.readBytes(length: buffer.readableBytes) ?? []
            guard let end = Self.find([13, 10, 13, 10], in: self.received) else { return }
            let text = String(decoding: self.received[..<end], as: UTF8.self)
            let lines = text.components(separatedBy: "\r\n")
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            let body = Array(self.received[(end + 4)...])
            let length = self.head ? 0 : headers["content-length"].flatMap(Int.init) ?? Int.max
            guard body.count >= length else { return }
            let status = lines.first?.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            self.done = true
            self.promise.succeed(HTTPAnswer(status: status, headers: headers, body: String(decoding: body, as: UTF8.self)))
        }

        func channelInactive(context: ChannelHandlerContext) {
            guard !self.done else { return }
            self.promise.fail(Failure(description: "closed before a whole response: \(self.received.count) bytes"))
        }

        private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
            guard haystack.count >= needle.count else { return nil }
            for index in 0...(haystack.count - needle.count) where Array(haystack[index..<(index + needle.count)]) == needle {
                return index
            }
            return nil
        }
    }
}

/// What `body` returns, or nil when it has not returned within `seconds` (it is cancelled then): bounds a wait for
/// pushes that come at once, in a test where they may never come.
func within<T: Sendable>(seconds: Int = 10, _ body: @escaping @Sendable () async throws -> T?) async throws -> T? {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        let first = try await group.next() ?? nil
        group.cancelAll()
        return first
    }
}

/// `value` without the members whose values the server makes up per call (times, event ids, broadcast sequences),
/// at any depth.
func withoutVolatile(_ value: JSONValue) -> JSONValue {
    switch value {
    case .object(let members):
        return .object(
            members.filter {
                !($0.key.hasSuffix("Ms") || $0.key.hasSuffix("Ts") || $0.key == "eventId" || $0.key == "sequence")
            }
                .map { ($0.key, withoutVolatile($0.value)) })
    case .array(let elements):
        return .array(elements.map(withoutVolatile))
    default:
        return value
    }
}
