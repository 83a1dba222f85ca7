import Histogram
import NIOCore
import NIOPosix
import SwitchboardWire
import Synchronization

/// What a benchmark connection does after its handshake.
/// How a request-sending connection gets each request.
enum RequestMaker: Sendable {
    /// The same request every time: each connection encodes its body once and sends it again under new request ids
    /// (as redis-benchmark formats its command once), so the load generator spends its time on the traffic.
    case constant(Request)
    /// A request made from the connection's sequence number (1, 2, ...).
    case perSequence(@Sendable (UInt64) -> Request)

    /// The request to send as number `sequence`.
    func request(_ sequence: UInt64) -> Request {
        switch self {
        case .constant(let request): return request
        case .perSequence(let make): return make(sequence)
        }
    }
}

enum BenchWork: Sendable {
    /// Keeps up to `depth` requests in flight until `stop` is set or `budget` requests were sent; with `pacing`,
    /// sends each request at its due time (open loop) instead of as soon as an answer frees a slot.
    case requests(depth: Int, make: RequestMaker, pacing: Pacing?)
    /// Stays idle (holds the connection).
    case idle
    /// Pipelines `count` requests and never reads a reply (a slow consumer).
    case neverRead(Request, count: Int)
    /// Sets its user metadata to one item of `valueBytes` bytes, then sends `burst` reads of it in one write, and
    /// another burst whenever all answers of the last one arrived, until `stop` is set (a client whose answers
    /// are far larger than its requests).
    case bigReads(valueBytes: Int, burst: Int)
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
    /// Connections that closed while requests of theirs were unanswered.
    let abandoned = Atomic<UInt64>(0)
    let budget: UInt64
    /// Latency histograms by response op.
    private let histograms = Mutex<[UInt8: Histogram<UInt64>]>([:])

    init(budget: UInt64) { self.budget = budget }

    /// An empty latency histogram (nanoseconds, up to a minute).
    static func makeHistogram() -> Histogram<UInt64> {
        Histogram(highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: .three)
    }

    /// Merges a connection's latency histograms (by response op).
    func merge(_ histograms: [UInt8: Histogram<UInt64>]) {
        self.histograms.withLock { merged in
            for (op, histogram) in histograms { merged[op, default: Self.makeHistogram()].add(histogram) }
        }
    }

    /// Latencies of every request.
    var latencies: Histogram<UInt64> {
        self.histograms.withLock { histograms in
            histograms.values.reduce(into: Self.makeHistogram()) { $0.add($1) }
        }
    }

    /// Latencies of the requests of one op.
    func latencies(of op: Opcode) -> Histogram<UInt64> {
        self.histograms.withLock { $0[op.rawValue] } ?? Self.makeHistogram()
    }

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
    /// Latencies by response op, created on the first response of each op (only request work has responses
    /// timed): a histogram is half a megabyte, too much for every idle or handshake connection.
    private var histograms: [UInt8: Histogram<UInt64>] = [:]
    /// Send time (or, paced, due time) of each request in flight, by request id modulo its size.
    private var sentAt: [UInt64]
    private var nextID: UInt32 = 0
    private var outstanding = 0
    private var sequence: UInt64 = 0
    private var output: ByteBuffer?
    /// When the big reader's last burst started.
    private var lastBurst: NIODeadline?
    static let bigReadBurstSpacing = TimeAmount.milliseconds(500)
    private var isReady = false
    /// Set when the budget is used up or the run was stopped: the connection closes once its answers are in.
    private var isExhausted = false
    private var pacer: Pacer?
    private var pacingTimer: Scheduled<Void>?
    private let encoder = FrameEncoder()
    /// The op and encoded body of a ``RequestMaker/constant(_:)`` request.
    private let constantRequest: (op: UInt8, body: ByteBuffer)?

    init(user: String, work: BenchWork, totals: BenchTotals, welcomed: EventLoopPromise<Void>) {
        self.user = user
        self.work = work
        self.totals = totals
        self.welcomed = welcomed
        if case .requests(let depth, _, _) = work {
            self.sentAt = Array(repeating: 0, count: max(depth, 1) * 4)
        } else {
            self.sentAt = []
        }
        if case .requests(_, .constant(let request), _) = work {
            var body = ByteBuffer()
            SwitchboardMessage.request(id: 0, request).encodeBody(into: &body)
            self.constantRequest = (request.operation.rawValue, body)
        } else {
            self.constantRequest = nil
        }
    }

    func channelActive(context: ChannelHandlerContext) {
        var hello = ByteBuffer()
        self.encoder.encode(.control(.hello(Hello(protocolVersion: 1, userId: self.user, clientName: SwitchboardVersion.productName("sbbench")))), into: &hello)
        context.writeAndFlush(self.wrapOutboundOut(hello), promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.totals.closed.wrappingAdd(1, ordering: .relaxed)
        self.pacingTimer?.cancel()
        if case .requests = self.work, self.outstanding > 0 { self.totals.abandoned.wrappingAdd(1, ordering: .relaxed) }
        if !self.histograms.isEmpty { self.totals.merge(self.histograms) }
        self.welcomed.fail(ChannelError.ioOnClosedChannel)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        if self.cumulation.readableBytes == 0 {
            self.cumulation = bytes  // no copy when nothing is left over from the last read
        } else {
            self.cumulation.writeBuffer(&bytes)
        }
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
                if !self.sentAt.isEmpty {
                    let sentAt = self.sentAt[Int(frame.header.requestID) % self.sentAt.count]
                    _ = self.histograms[frame.header.op, default: BenchTotals.makeHistogram()].record(now > sentAt ? now - sentAt : 0)
                }
                self.outstanding -= 1
                self.totals.answered.wrappingAdd(1, ordering: .relaxed)
                self.sendRequests(context: context, now: now)
                self.sendBigReadBurst(context: context)
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
        self.closeIfDone(context: context)
    }

    private func closeIfDone(context: ChannelHandlerContext) {
        if case .requests = self.work, self.isExhausted, self.outstanding == 0, self.isReady {
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
        case .bigReads(let valueBytes, _):
            let item = MetadataItem(key: "big", value: String(repeating: "v", count: valueBytes))
            var buffer = ByteBuffer()
            self.encoder.encode(.request(id: 1, .setUserMetadata(SetUserMetadataRequest(items: [item]))), into: &buffer)
            self.nextID = 1
            self.outstanding = 1
            context.writeAndFlush(self.wrapOutboundOut(buffer), promise: nil)
        case .requests(_, _, let pacing):
            let now = NIODeadline.now().uptimeNanoseconds
            if let pacing { self.pacer = Pacer(start: now, ratePerSecond: pacing.ratePerSecond, phase: pacing.phase) }
            self.sendRequests(context: context, now: now)
            self.flushPacedOutput(context: context)
        }
    }

    /// ``BenchWork/bigReads(valueBytes:burst:)``: the next burst, once every answer of the last one arrived and at
    /// least ``bigReadBurstSpacing`` after the last one started (so the reads stay under the gateway's default rate
    /// limit of 20,000 requests per second).
    private func sendBigReadBurst(context: ChannelHandlerContext) {
        guard case .bigReads(_, let burst) = self.work, self.outstanding == 0, self.pacingTimer == nil else { return }
        guard !self.totals.stop.load(ordering: .relaxed) else {
            context.close(promise: nil)
            return
        }
        let now = NIODeadline.now()
        if let last = self.lastBurst, now - last < Self.bigReadBurstSpacing {
            let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
            self.pacingTimer = context.eventLoop.scheduleTask(deadline: last + Self.bigReadBurstSpacing) {
                let (handler, context) = bound.value
                handler.pacingTimer = nil
                handler.sendBigReadBurst(context: context)
                handler.flushPacedOutput(context: context)
            }
            return
        }
        self.lastBurst = now
        if self.output == nil { self.output = context.channel.allocator.buffer(capacity: burst * 8) }
        for _ in 0..<burst {
            self.nextID = self.nextID == UInt32.max ? 1 : self.nextID + 1
            self.encoder.encode(.request(id: self.nextID, .getUserMetadata(GetUserMetadataRequest())), into: &self.output!)
        }
        self.outstanding = burst
    }

    /// Sends what the depth (and, paced, the schedule) allows; with a schedule, arms a timer for the next due send.
    private func sendRequests(context: ChannelHandlerContext, now: UInt64) {
        guard case .requests(let depth, let make, _) = self.work, !self.isExhausted else { return }
        while self.outstanding < depth {
            var sentAt = now
            if self.pacer != nil {
                guard self.pacer!.nextDue <= now else { break }
            }
            guard self.totals.takeOne() else {
                self.isExhausted = true
                break
            }
            if self.pacer != nil, let due = self.pacer!.takeDue(now: now) { sentAt = due }
            self.nextID = self.nextID == UInt32.max ? 1 : self.nextID + 1
            self.sentAt[Int(self.nextID) % self.sentAt.count] = sentAt
            self.sequence += 1
            if self.output == nil { self.output = context.channel.allocator.buffer(capacity: 64 * depth) }
            if let constant = self.constantRequest {
                let header = FrameHeader(kind: .request, op: constant.op, requestID: self.nextID)
                self.encoder.encode(header: header, body: constant.body, into: &self.output!)
            } else {
                self.encoder.encode(.request(id: self.nextID, make.request(self.sequence)), into: &self.output!)
            }
            self.outstanding += 1
        }
        self.armPacingTimer(context: context)
    }

    /// Schedules the next paced send, unless one is scheduled, the run is over, or the depth is used up (then the
    /// next answer sends it).
    private func armPacingTimer(context: ChannelHandlerContext) {
        guard let pacer = self.pacer, self.pacingTimer == nil, !self.isExhausted,
            case .requests(let depth, _, _) = self.work, self.outstanding < depth
        else { return }
        let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        self.pacingTimer = context.eventLoop.scheduleTask(deadline: NIODeadline.uptimeNanoseconds(pacer.nextDue)) {
            let (handler, context) = bound.value
            handler.pacingTimer = nil
            handler.sendRequests(context: context, now: NIODeadline.now().uptimeNanoseconds)
            handler.flushPacedOutput(context: context)
            handler.closeIfDone(context: context)
        }
    }

    /// Writes the requests made outside a read (at the start, or when a paced request fell due).
    private func flushPacedOutput(context: ChannelHandlerContext) {
        if let output = self.output {
            self.output = nil
            context.writeAndFlush(self.wrapOutboundOut(output), promise: nil)
        }
    }
}

@available(*, unavailable)
extension BenchConnectionHandler: Sendable {}
