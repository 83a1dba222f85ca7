import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// An application backend's webhook endpoint for the tests: an HTTP/1.1 server on a loopback port that records every
/// request and answers 500 while ``failing`` (or for the first `failFirst` requests), 200 otherwise.
final class WebhookReceiver: Sendable {
    /// One request as received, and the status it was answered with.
    struct Received: Sendable {
        /// Header names in lower case.
        var headers: [String: String]
        var body: String
        var status: Int
        /// When it arrived (ms since the Unix epoch).
        var receivedMs: Int64

        var id: String { self.headers["webhook-id"] ?? "" }
        var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(self.body.utf8)) as? [String: Any]) ?? [:]
        }
        var type: String { self.json["type"] as? String ?? "" }
    }

    private struct State {
        var received: [Received] = []
        var failFirst: Int
        var failing = false
        var holding = false
    }

    private let state: Mutex<State>
    private let channel: any Channel
    /// The URL to configure.
    let url: String

    private init(channel: any Channel, failFirst: Int) {
        self.channel = channel
        self.state = Mutex(State(failFirst: failFirst))
        self.url = "http://127.0.0.1:\(channel.localAddress?.port ?? 0)/hooks"
    }

    /// Starts a receiver on a free loopback port that answers 500 to the first `failFirst` requests.
    static func start(failFirst: Int = 0) async throws -> WebhookReceiver {
        let box = ReceiverBox()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.configureHTTPServerPipeline()
                    try child.pipeline.syncOperations.addHandler(Handler(answer: { head, body in box.answer(head, body) }))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let receiver = WebhookReceiver(channel: channel, failFirst: failFirst)
        box.receiver.withLock { $0 = receiver }
        return receiver
    }

    /// Whether every request is answered 500 from now on.
    var failing: Bool {
        get { self.state.withLock { $0.failing } }
        set { self.state.withLock { $0.failing = newValue } }
    }

    /// Whether requests from now on are left unanswered (recorded with status 0): the sender's try stays in flight
    /// until its timeout.
    var holding: Bool {
        get { self.state.withLock { $0.holding } }
        set { self.state.withLock { $0.holding = newValue } }
    }

    /// Every request so far, in arrival order.
    var received: [Received] { self.state.withLock { $0.received } }

    /// The requests answered 200, in arrival order.
    var accepted: [Received] { self.received.filter { $0.status == 200 } }

    /// Waits until `done` holds for the requests (checked every 20 ms), at most `timeout`.
    func wait(timeout: Duration = .seconds(20), until done: ([Received]) -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if done(self.received) { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return done(self.received)
    }

    func stop() async {
        try? await self.channel.close()
    }

    fileprivate func answer(_ head: HTTPRequestHead, _ body: String) -> HTTPResponseStatus? {
        self.state.withLock { state in
            var headers: [String: String] = [:]
            for (name, value) in head.headers { headers[name.lowercased()] = value }
            if state.holding {
                state.received.append(
                    Received(
                        headers: headers, body: body, status: 0, receivedMs: Int64(Date().timeIntervalSince1970 * 1000)))
                return nil
            }
            let fail = state.failing || state.failFirst > 0
            if state.failFirst > 0 { state.failFirst -= 1 }
            let status: HTTPResponseStatus = fail ? .internalServerError : .ok
            state.received.append(
                Received(
                    headers: headers, body: body, status: Int(status.code),
                    receivedMs: Int64(Date().timeIntervalSince1970 * 1000)))
            return status
        }
    }

    private final class ReceiverBox: Sendable {
        let receiver = Mutex<WebhookReceiver?>(nil)

        func answer(_ head: HTTPRequestHead, _ body: String) -> HTTPResponseStatus? {
            guard let receiver = self.receiver.withLock({ $0 }) else { return .serviceUnavailable }
            return receiver.answer(head, body)
        }
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        private let answer: @Sendable (HTTPRequestHead, String) -> HTTPResponseStatus?
        private var head: HTTPRequestHead?
        private var body = ByteBuffer()

        init(answer: @escaping @Sendable (HTTPRequestHead, String) -> HTTPResponseStatus?) {
            self.answer = answer
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch self.unwrapInboundIn(data) {
            case .head(let head):
                self.head = head
                self.body.clear()
            case .body(var part):
                self.body.writeBuffer(&part)
            case .end:
                guard let head = self.head else { return }
                guard let status = self.answer(head, String(buffer: self.body)) else {
                    self.head = nil  // held: never answered
                    return
                }
                var headers = HTTPHeaders()
                headers.add(name: "content-length", value: "0")
                context.write(self.wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
                context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
                self.head = nil
            }
        }
    }
}
