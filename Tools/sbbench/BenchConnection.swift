import Histogram
import NIOCore
import NIOPosix
import SwitchboardWire
import Synchronization

/// What a benchmark connection does after its handshake.
enum BenchWork: Sendable {
    /// Keeps `depth` requests in flight until `stop` is set or `budget` requests were sent.
    case requests(depth: Int, make: @Sendable (UInt64) -> Request)
    /// Stays idle (holds the connection).
    case idle
    /// Pipelines `count` requests and never reads a reply (a slow consumer).
    case neverRead(Request, count: Int)
    /// Closes right after WELCOME (handshake benchmarks).
    case closeAfterWelcome
    /// Subscribes to a channel with presence events and counts the presence pushes it receives.
    case join(channel: String)
}

/// Counters shared by all connections of a run.
final class BenchTotals: Sendable {
    let sent = Atomic<UInt64>(0)
    let answered = Atomic<UInt64>(0)
    let errors = Atomic<UInt64>(0)
    let welcomed = Atomic<UInt64>(0)
    let closed = Atomic<UInt64>(0)
    let stop = Atomic<Bool>(false)
    let joined = Atomic<UInt64>(0)
    let presencePushes = Atomic<UInt64>(0)
    let intervalPushes = Atomic<UInt64>(0)
    let joinEventPushes = Atomic<UInt64>(0)
    let budget: UInt64
    private let histograms = Mutex<Histogram<UInt64>>(Histogram(highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: .three))

    init(budget: UInt64) { self.budget = budget }

    /// Merges a connection's latency histogram.
    func merge(_ histogram: Histogram<UInt64>) {
        self.histograms.withLock { $0.add(histogram) }
    }

    var latencies: Histogram<UInt64> { self.histograms.withLock { $0 } }

    /// Takes one request from the budget; false when the run is over.
    func takeOne() -> Bool {
        if self.stop.load(ordering: .relaxed) { return false }
        let previous = self.sent.wrappingAdd(1, ordering: .relaxed).oldValue
        if previous >= self.budget {
            self.sent.wrappingSubtract(1, ordering: .relaxed)
            return false
        }
        return true
    }
}

/// A lean pipelined benchmark client: one handler, its own framing, latency per request id in a histogram.
final class BenchConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let user: String
    private let work: BenchWork
    private let totals: BenchTotals
    private let welcomed: EventLoopPromise<Void>
    private var decoder = FrameDecoder(direction: .serverToClient)
    private var cumulation = ByteBuffer()
    /// Created only for request work: a histogram is half a megabyte, too much for idle or handshake connections.
    private var histogram: Histogram<UInt64>?
    private var sentAt: [UInt64]
    private var nextID: UInt32 = 0
    private var outstanding = 0
    private var sequence: UInt64 = 0
    private var output: ByteBuffer?
    private var isReady = false
    private let encoder = FrameEncoder()

    init(user: String, work: BenchWork, totals: BenchTotals, welcomed: EventLoopPromise<Void>) {
        self.user = user
        self.work = work
        self.totals = totals
        self.welcomed = welcomed
        if case .requests(let depth, _) = work {
            self.sentAt = Array(repeating: 0, count: max(depth, 1) * 4)
            self.histogram = Histogram(highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: .three)
        } else {
            self.sentAt = []
        }
    }

    func channelActive(context: ChannelHandlerContext) {
        var hello = ByteBuffer()
        self.encoder.encode(.control(.hello(Hello(protocolVersion: 1, userId: self.user, clientName: "sbbench"))), into: &hello)
        context.writeAndFlush(self.wrapOutboundOut(hello), promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.totals.closed.wrappingAdd(1, ordering: .relaxed)
        if let histogram = self.histogram { self.totals.merge(histogram) }
        self.welcomed.fail(ChannelError.ioOnClosedChannel)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        self.cumulation.writeBuffer(&bytes)
        let now = NIODeadline.now().uptimeNanoseconds
        while let frame = try? self.decoder.decodeFrame(from: &self.cumulation) {
            switch frame.header.kind {
            case .control where frame.header.op == ControlOp.welcome.rawValue:
                self.welcomeReceived(context: context)
            case .push where frame.header.op == PushCode.presenceEvent.rawValue:
                self.totals.presencePushes.wrappingAdd(1, ordering: .relaxed)
                if case .push(.presenceEvent(let event)) = try? SwitchboardMessage.decode(frame) {
                    if event.eventType == .interval { self.totals.intervalPushes.wrappingAdd(1, ordering: .relaxed) }
                    if event.eventType == .remoteJoin { self.totals.joinEventPushes.wrappingAdd(1, ordering: .relaxed) }
                }
            case .response where { if case .join = self.work { return true } else { return false } }():
                self.totals.joined.wrappingAdd(1, ordering: .relaxed)
            case .response:
                if frame.header.flags.contains(.error) { self.totals.errors.wrappingAdd(1, ordering: .relaxed) }
                let slot = Int(frame.header.requestID) % max(self.sentAt.count, 1)
                if !self.sentAt.isEmpty { _ = self.histogram?.record(now &- self.sentAt[slot]) }
                self.outstanding -= 1
                self.totals.answered.wrappingAdd(1, ordering: .relaxed)
                self.sendRequests(context: context, now: now)
            default:
                break
            }
        }
        self.cumulation.discardReadBytes()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if let output = self.output {
            self.output = nil
            context.writeAndFlush(self.wrapOutboundOut(output), promise: nil)
        }
        if case .requests = self.work, self.outstanding == 0, self.isReady {
            context.close(promise: nil)
        }
    }

    private func welcomeReceived(context: ChannelHandlerContext) {
        self.isReady = true
        self.totals.welcomed.wrappingAdd(1, ordering: .relaxed)
        self.welcomed.succeed(())
        switch self.work {
        case .closeAfterWelcome:
            context.close(promise: nil)
        case .join(let channel):
            var buffer = ByteBuffer()
            self.encoder.encode(.request(id: 1, .subscribeChannel(SubscribeChannelRequest(channel: channel))), into: &buffer)
            context.writeAndFlush(self.wrapOutboundOut(buffer), promise: nil)
        case .idle:
            break
        case .neverRead(let request, let count):
            // Stop reading: the server's replies pile up in the socket, then in the server.
            _ = context.channel.setOption(.autoRead, value: false)
            var buffer = ByteBuffer()
            for id in 1...UInt32(max(count, 1)) {
                self.encoder.encode(.request(id: id, request), into: &buffer)
                if buffer.readableBytes > 64 << 10 {
                    context.write(self.wrapOutboundOut(buffer), promise: nil)
                    buffer = ByteBuffer()
                }
            }
            context.writeAndFlush(self.wrapOutboundOut(buffer), promise: nil)
        case .requests:
            self.sendRequests(context: context, now: NIODeadline.now().uptimeNanoseconds)
        }
    }

    private func sendRequests(context: ChannelHandlerContext, now: UInt64) {
        guard case .requests(let depth, let make) = self.work else { return }
        while self.outstanding < depth, self.totals.takeOne() {
            self.nextID = self.nextID == UInt32.max ? 1 : self.nextID + 1
            self.sentAt[Int(self.nextID) % self.sentAt.count] = now
            self.sequence += 1
            if self.output == nil { self.output = context.channel.allocator.buffer(capacity: 64 * depth) }
            self.encoder.encode(.request(id: self.nextID, make(self.sequence)), into: &self.output!)
            self.outstanding += 1
        }
    }
}

@available(*, unavailable)
extension BenchConnectionHandler: Sendable {}
