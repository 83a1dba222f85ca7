import CoreMetrics
#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore
import NIOSSL
import SwitchboardWire

/// One connection's NIO callbacks: framing, handshake, dispatch and heartbeats, with the decisions in value types.
///
/// The handler does its own cumulation and decoding (no hop through a second handler per frame). What it decides
/// is kept in three state machines that do no I/O, and the handler feeds them events and performs the actions they
/// return: ``ConnectionStateMachine`` (logged in, draining, closed; requests in flight; deadlines; why the session
/// ends), ``InputStateMachine`` (when decoding runs and reads go on) and ``OutboundStateMachine`` (the output path:
/// every reply of a read batch appended to one buffer and written once in `channelReadComplete`, later replies and
/// pushes coalesced with one flush per event-loop tick, direct sends to the socket, held pushes, water marks and
/// the hard cap).
final class ConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    // What a push reads and writes comes first, declared together so that it shares as few cache lines as it can:
    // a fan-out to thousands of idle connections is bound by the cache misses on each connection's handler.
    private let core: GatewayCore
    /// Whether the connection is logged in, draining or closed, its requests in flight and why it ends.
    private var machine: ConnectionStateMachine
    /// The output path: this tick's frames, held pushes, coalescing, direct sends, water marks and the hard cap.
    private var outbound: OutboundStateMachine
    /// The socket, when the handler knows it (the gateway's plain TCP and Unix-socket listeners): output then goes
    /// to the socket directly while the channel holds none of it. Nil for TLS connections, whose every byte must go
    /// through the TLS handler in the pipeline, and for channels without a socket (sbbench's in-process sessions).
    private let socket: DirectSocketWriter?
    /// The connection's socket for asking whether the client's first bytes still wait unread (at the handshake
    /// deadline, see ``checkDeadlines(now:)``); also known on TLS connections. Never read from or written to here.
    private let descriptor: CInt?
    /// Whether the channel delivered any of the client's bytes yet.
    private var readAny = false
    /// This loop's end-of-tick flush list.
    private var flushBatch: FlushBatch?
    /// The loop's inbox, through which answers completed on other threads arrive (nil off the gateway's loops).
    private var inbox: LoopInbox?
    private var context: ChannelHandlerContext?

    private var connectionID: UInt64 = 0
    private var decoder: FrameDecoder
    private var encoder = FrameEncoder()
    private var cumulation: ByteBuffer?
    /// When decoding runs, and the read and end of input that wait while it does not.
    private var input = InputStateMachine()

    private var session: SessionHandle?
    private var rateLimiter: TokenBucket?
    /// When the last read arrived; also the arrival time of every request in that read (one clock read per batch).
    private var lastReceived = NIODeadline.now()
    /// Closes the connection at the end of the closing grace period if the client has not closed it before.
    private var closingDeadline: Scheduled<Void>?
    /// Server time in ms for the requests of the current read, read from the clock once when first needed.
    private var readNowMillis: Int64?
    private var heartbeatTask: Scheduled<Void>?
    private var handshakeTimer: Scheduled<Void>?

    /// The output one pass over the received bytes may produce before decoding stops to let it leave (SB-5.9-4):
    /// a client that pipelines thousands of large reads is answered in slices, not in one unbounded buffer that
    /// holds the loop while it grows.
    static let readPassOutputLimit = 256 << 10
    /// How long a closing connection waits for the client to take the last frames and close its side (SB-5.8-5).
    static let closingGracePeriod = TimeAmount.seconds(2)
    /// Leftover bytes of a partial frame are copied out of a read buffer above this size when they use less than
    /// half of it, so that a frame trickled in slowly pins about the bytes that arrived, not a large buffer.
    static let compactionThreshold = 4096

    /// Creates the handler of one connection; with `socket`, output is written to it directly when possible (never
    /// give it for a connection with a TLS handler: direct writes would bypass the encryption).
    ///
    /// `descriptor`: the connection's socket when `socket` is nil (a TLS connection), for the handshake deadline's
    /// check that the client's first bytes are not still waiting for the server.
    init(core: GatewayCore, socket: DirectSocketWriter? = nil, descriptor: CInt? = nil) {
        self.core = core
        self.socket = socket
        self.descriptor = socket?.descriptor ?? descriptor
        let limits = core.configuration.limits
        self.outbound = OutboundStateMachine(
            limits: OutboundStateMachine.Limits(
                highWaterMark: limits.outboundHighWaterMark, lowWaterMark: limits.outboundLowWaterMark,
                hardCap: limits.outboundHardCap),
            hasSocket: socket != nil)
        self.machine = ConnectionStateMachine(
            maxInflight: limits.maxInflight, heartbeatMisses: core.configuration.heartbeat.misses)
        self.decoder = FrameDecoder(
            limits: FrameLimits(
                maxFrameSize: limits.handshakeMaxFrameSize, maxInflatedSize: limits.handshakeMaxFrameSize,
                compressionEnabled: false),
            direction: .clientToServer)
    }

    // MARK: lifecycle

    /// Logs with the connection id and user attached; builds nothing when the level is off (logging is rare here,
    /// and a per-connection Logger with metadata would cost an allocation per handshake).
    private func log(_ level: Logger.Level, _ message: Logger.Message, _ extra: Logger.Metadata = [:]) {
        let logger = self.core.logger
        guard logger.logLevel <= level else { return }
        var metadata = extra
        metadata["connection"] = "\(self.connectionID)"
        if let user = self.session?.info.userID { metadata["user"] = "\(user)" }
        logger.log(level: level, message, metadata: metadata)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.flushBatch = self.core.flushBatches.batch(for: context.eventLoop)
        self.inbox = self.core.inboxes.inbox(for: context.eventLoop)
    }

    func channelActive(context: ChannelHandlerContext) {
        let limits = self.core.configuration.limits
        guard let id = self.core.registry.admitConnection(
            limit: limits.maxConnections, eventLoop: context.eventLoop, handler: self)
        else {
            self.core.metrics.recordLimitHit("maxConnections")
            _ = self.machine.closing()
            var goAway = ByteBuffer()
            self.encoder.encode(
                .control(.goAway(GoAway(code: UInt64(ErrorCode.tooManyConnections.rawValue), message: "server is full"))),
                into: &goAway)
            let written = context.eventLoop.makePromise(of: Void.self)
            context.writeAndFlush(self.wrapOutboundOut(goAway), promise: written)
            written.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            return
        }
        self.connectionID = id
        self.core.metrics.connections.increment()
        self.core.metrics.connectionsAccepted.increment()
        self.lastReceived = .now()
        self.machine.connected(at: self.lastReceived, handshakeTimeout: self.core.configuration.handshakeTimeout)
        if let batch = self.flushBatch {
            batch.watch(self)
        } else {
            self.handshakeTimer = context.eventLoop.assumeIsolated().scheduleTask(
                in: self.core.configuration.handshakeTimeout
            ) { [weak self] in self?.checkDeadlines(now: .now()) }
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.flushBatch?.unwatch(self)
        self.heartbeatTask?.cancel()
        self.handshakeTimer?.cancel()
        self.closingDeadline?.cancel()
        self.closingDeadline = nil
        let wasAdmitted = self.connectionID != 0
        _ = self.machine.channelClosed()
        self.outbound.channelClosed()  // held pushes are forgotten: they would never be read
        if self.outbound.pushesInProgress > 0 {
            // A push an area is sending (often under its own lock) met the closed socket: the areas learn of the end
            // right after that send, never inside it (their `sessionEnded` may take the same lock).
            context.eventLoop.assumeIsolated().execute { self.endSession() }
        } else {
            self.endSession()
        }
        if wasAdmitted {
            self.core.registry.connectionClosed(self.connectionID)
            self.core.metrics.connections.decrement()
        }
        self.context = nil
        context.fireChannelInactive()
    }

    /// Ends the session (once): it leaves the registry and its observers (presence, locks, online state) learn why.
    private func endSession() {
        guard let session = self.session else { return }
        let reason = self.machine.endReason ?? .abnormal
        self.session = nil
        self.core.registry.unregister(session)
        self.core.metrics.sessions.decrement()
        self.core.metrics.recordSessionEnd(reason)
        self.log(.debug, "session ended", ["user": "\(session.info.userID)", "reason": "\(reason)"])
        for observer in self.core.observers { observer.sessionEnded(session, reason: reason) }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            self.inputClosed(context: context)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// The client shut down its sending side (the gateway allows half-closure): answers already due still go out.
    private func inputClosed(context: ChannelHandlerContext) {
        // Complete frames still wait to be decoded: the end of input is handled after them.
        if self.machine.isOpen && self.input.inputEnded() { return }
        let partial = self.cumulation?.readableBytes ?? 0
        if partial > 0 && self.machine.isOpen {
            self.log(.info, "stream ended inside a frame", ["bytes": "\(partial)"])
        }
        self.perform(self.machine.inputClosed(partialFrameBytes: partial))
    }

    /// Carries out what the state machine decided.
    private func perform(_ action: ConnectionStateMachine.Action) {
        switch action {
        case .none:
            break
        case .fail(let code, let reason, let message):
            self.fail(code: code, message: message, reason: reason)
        case .sendGoAway(let code, let reason, let message, let thenClose):
            if code != 0 { self.core.metrics.recordError(ErrorCode(rawValue: code)) }
            self.sendGoAway(code: code, reason: reason, message: message)
            if thenClose { self.closeConnection() }
        case .closeConnection:
            self.closeConnection()
        case .closeSocket:
            self.context?.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A TLS client that closed its side without close_notify: the end of input (or the channel's close) that
        // comes next is handled as on a plain connection, so the answers already due are not dropped.
        if let tlsError = error as? NIOSSLError, case .uncleanShutdown = tlsError { return }
        // Socket errors (reset by peer and the like): the session ends abnormally.
        self.log(.debug, "connection error", ["error": "\(error)"])
        context.close(promise: nil)
    }

    // MARK: reading

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // A closing connection reads and discards until the client closes (SB-5.8-5).
        guard self.machine.isOpen else { return }
        let bytes = self.unwrapInboundIn(data)
        self.core.metrics.bytesIn.increment(by: Int64(bytes.readableBytes))
        self.lastReceived = .now()
        self.readAny = true
        self.readNowMillis = nil
        self.outbound.readStarted()
        if var existing = self.cumulation {
            self.cumulation = nil  // keep the buffer uniquely referenced while appending
            var incoming = bytes
            existing.writeBuffer(&incoming)
            self.cumulation = existing
        } else {
            self.cumulation = bytes
        }
        if self.input.decodes {
            self.decodeCumulation(context: context)
        }
    }

    /// Decodes and handles the complete frames received, until the output of this pass reaches
    /// ``readPassOutputLimit`` (then decoding pauses, see ``pauseDecoding(context:)``).
    private func decodeCumulation(context: ChannelHandlerContext) {
        guard var buffer = self.cumulation else { return }
        self.cumulation = nil
        while self.machine.isOpen && self.input.decodes {
            if self.outbound.pendingBytes >= Self.readPassOutputLimit, buffer.readableBytes > 0 {
                self.pauseDecoding(context: context)
                break
            }
            let frame: Frame
            do {
                guard let next = try self.decoder.decodeFrame(from: &buffer) else { break }
                frame = next
            } catch {
                self.frameError(error)
                continue
            }
            self.machine.lastFrameReceived = self.lastReceived
            self.core.metrics.framesIn.increment()
            self.frameReceived(frame)
        }
        if buffer.readableBytes > 0 && self.machine.isOpen {
            self.cumulation = Self.retained(buffer, allocator: context.channel.allocator)
        }
    }

    /// The unread rest of a read buffer, kept until more bytes arrive: copied into a buffer of its own size when it
    /// fills less than half of a large one, otherwise kept in place with the read bytes discarded.
    static func retained(_ unread: ByteBuffer, allocator: ByteBufferAllocator) -> ByteBuffer {
        var unread = unread
        if unread.capacity > Self.compactionThreshold, unread.readableBytes * 2 < unread.capacity {
            var compact = allocator.buffer(capacity: unread.readableBytes)
            compact.writeBuffer(&unread)
            return compact
        }
        unread.discardReadBytes()
        return unread
    }

    /// Stops decoding for now: the output so far leaves, reading stops, and decoding resumes on a later tick (at
    /// once if the socket took the output, otherwise when the client has read its answers down to the low-water
    /// mark).
    private func pauseDecoding(context: ChannelHandlerContext) {
        self.input.outputLimitReached()
        self.flushOutput()
        self.updateReadBackpressure(context: context)
        self.perform(self.input.pausedOutputFlushed(readsHeldBack: self.readsHeldBack), context: context)
    }

    /// Whether the output path holds reading back (SB-5.9-1).
    private var readsHeldBack: Bool { self.outbound.backpressure == .on }

    /// Carries out what the input state machine decided.
    private func perform(_ action: InputStateMachine.Action, context: ChannelHandlerContext) {
        switch action {
        case .none:
            break
        case .read:
            context.read()
        case .scheduleResume:
            context.eventLoop.assumeIsolated().execute { [weak self] in
                self?.resumeDecoding(context: context)
            }
        case .endOfInput:
            self.inputClosed(context: context)
        }
    }

    /// Decodes the input held back (while decoding was paused, or a token was verified), then passes on an end of
    /// input or reads again if the channel asked for either meanwhile.
    private func decodeHeldInput(context: ChannelHandlerContext) {
        self.outbound.readStarted()
        self.readNowMillis = nil
        self.decodeCumulation(context: context)
        self.outbound.readEnded()
        self.flushOutput()
        guard self.machine.isOpen else { return }
        self.perform(self.input.heldInputDecoded(readsHeldBack: self.readsHeldBack), context: context)
    }

    /// Decodes what waited while decoding was paused, then reads again if the channel asked for a read meanwhile.
    private func resumeDecoding(context: ChannelHandlerContext) {
        guard self.machine.isOpen, self.input.resumeRan(readsHeldBack: self.readsHeldBack) else { return }
        self.decodeHeldInput(context: context)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        self.outbound.readEnded()
        self.flushOutput()
        context.fireChannelReadComplete()
    }

    func read(context: ChannelHandlerContext) {
        // Backpressure: while the client does not drain its replies, stop reading its requests; while a read pass's
        // output leaves, or HELLO's token is verified, read nothing new either.
        if self.input.readRequested(readsHeldBack: self.readsHeldBack) { context.read() }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if self.outbound.writabilityChanged(context.channel.isWritable) {
            self.releaseHeldPushes(context: context)
        }
        self.updateReadBackpressure(context: context)
        context.fireChannelWritabilityChanged()
    }

    /// The channel's write window (its NIO write-buffer water marks) for a gateway whose configured low-water mark is
    /// `lowWaterMark`: small, so that queued pushes wait in ``output`` where replies can pass them.
    static func writeWindow(lowWaterMark: Int) -> NIOCore.ChannelOptions.Types.WriteBufferWaterMark {
        let high = max(min(64 << 10, lowWaterMark), 2)
        return NIOCore.ChannelOptions.Types.WriteBufferWaterMark(low: high / 2, high: high)
    }

    /// What the channel buffers of the connection's output.
    private func channelBufferedBytes(context: ChannelHandlerContext) -> Int {
        (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
    }

    /// SB-5.9-1: stops reading above the high-water mark of queued bytes and resumes below the low-water mark.
    private func updateReadBackpressure(context: ChannelHandlerContext) {
        let action = self.outbound.queueMeasured(
            channelBufferedBytes: self.channelBufferedBytes(context: context), applyingHardCap: false)
        self.perform(action, context: context)
    }

    /// Carries out what a measurement of the queued bytes decided.
    private func perform(_ action: OutboundStateMachine.QueueAction, context: ChannelHandlerContext) {
        switch action {
        case .none:
            break
        case .stopReading:
            self.core.metrics.recordLimitHit("outboundHighWaterMark")
        case .resumeReading:
            self.perform(self.input.readsReleased(), context: context)
        case .cutOff(let queued, let readsStopped):
            // A client that does not read: past the hard cap it is cut off, so it cannot hold memory.
            if readsStopped { self.core.metrics.recordLimitHit("outboundHighWaterMark") }
            self.core.metrics.recordLimitHit("outboundHardCap")
            self.log(.info, "slow consumer disconnected", ["queuedBytes": "\(queued)"])
            // GOAWAY goes behind the backlog the client is not reading, and nothing more is queued after it: the
            // client reads it if it reads again within the closing grace period (SB-5.9-1, SB-5.8-5).
            self.perform(self.machine.cutOffAsSlowConsumer(queuedBytes: queued))
        }
    }

    /// Holds a push behind the ones already waiting (called while pushes must wait).
    private func hold(_ frame: ByteBuffer) {
        self.core.metrics.framesOut.increment()
        // The end-of-tick check applies the high-water mark and the hard cap.
        self.perform(self.outbound.hold(frame))
    }

    /// Hands held pushes to the channel, in order, while its write window takes them.
    private func releaseHeldPushes(context: ChannelHandlerContext) {
        guard self.outbound.releaseStarted() else { return }
        repeat {
            var released = false
            while let frame = self.outbound.nextHeldPush(
                channelWritable: context.channel.isWritable && self.machine.isOpen)
            {
                self.core.metrics.bytesOut.increment(by: Int64(frame.readableBytes))
                context.write(self.wrapOutboundOut(frame), promise: nil)
                released = true
            }
            // The flush may write everything at once and report the channel writable again (another round).
            if released { self.flushChannel(context: context) }
        } while self.outbound.releaseRoundEnded()
    }

    private func frameError(_ error: SwitchboardWireError) {
        self.core.metrics.recordError(error.code)
        if let requestID = error.requestID, error.keepsConnectionOpen, self.machine.isLoggedIn {
            self.send(.error(id: requestID, op: error.op ?? 0, ErrorBody(error.code, error.message)))
            return
        }
        let reason: SessionEndReason = error.code == .heartbeatTimeout ? .abnormal : .protocolError
        self.fail(code: error.code, message: error.message, reason: reason)
    }

    private func frameReceived(_ frame: Frame) {
        switch self.machine.state {
        case .awaitingHello:
            guard frame.header.kind == .control, frame.header.op == ControlOp.hello.rawValue else {
                self.fail(code: .handshakeRequired, message: "the first frame must be HELLO", reason: .protocolError)
                return
            }
            do {
                guard case .control(.hello(let hello)) = try SwitchboardMessage.decode(frame) else { return }
                self.helloReceived(hello)
            } catch {
                self.fail(code: error.code, message: error.message, reason: .protocolError)
            }
        case .ready, .draining:
            switch frame.header.kind {
            case .control:
                self.controlReceived(frame)
            case .request:
                self.requestReceived(frame)
            case .response, .push:
                // The decoder's direction check rejects these before they get here.
                self.fail(code: .badHeader, message: "clients may not send \(frame.header.kind)", reason: .protocolError)
            }
        case .closed:
            return
        }
    }

    // MARK: handshake

    private func helloReceived(_ hello: Hello) {
        if let failure = Handshake.precheck(hello) {
            self.fail(code: failure.code, message: failure.message, reason: .protocolError)
            return
        }
        let now = self.core.nowMillis()
        let policy = self.core.credentials.loginPolicy
        guard let authority = self.core.authority else {
            self.helloVerified(hello, Handshake.openIdentity(hello, policy: policy, nowMillis: now))
            return
        }
        guard let context = self.context else { return }
        // jwt-kit verifies asynchronously: in a task (on this loop's thread) and back. Until then nothing more is
        // decoded or read (the handshake timeout still runs: the connection is awaiting HELLO's answer).
        self.input.helloVerificationStarted()
        let connection = NIOLoopBound(self, eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        let defaultGrants = self.core.configuration.defaultGrants
        Task(executorPreference: EventLoopTaskExecutor(eventLoop)) {
            let identity = await Handshake.verify(
                hello, authority: authority, policy: policy, defaultGrants: defaultGrants, nowMillis: now)
            eventLoop.execute { connection.value.helloVerified(hello, identity) }
        }
    }

    /// Answers HELLO once its credentials are checked: WELCOME and the session, or GOAWAY; then decodes what
    /// arrived meanwhile.
    private func helloVerified(_ hello: Hello, _ identity: Result<SessionIdentity, SwitchboardWireError>) {
        let wasVerifying = self.input.helloVerified()
        // The connection may have ended meanwhile (the handshake timeout, the client gone).
        guard self.machine.state == .awaitingHello, self.context != nil else { return }
        self.startSession(hello, identity)
        guard wasVerifying, let context = self.context else { return }
        self.decodeHeldInput(context: context)
    }

    private func startSession(_ hello: Hello, _ identity: Result<SessionIdentity, SwitchboardWireError>) {
        let now = self.core.nowMillis()
        let accepted: AcceptedHello
        switch identity {
        case .success(let identity):
            accepted = Handshake.terms(hello, identity: identity, heartbeat: self.core.configuration.heartbeat)
        case .failure(let error):
            self.fail(code: error.code, message: error.message, reason: .protocolError)
            return
        }
        let configuration = self.core.configuration
        let (userID, role, features, interval) = (accepted.userID, accepted.role, accepted.features, accepted.heartbeatInterval)
        let tokenExpiresAtMs = accepted.tokenExpiresAtMs
        let supportsCompression = accepted.supportsCompression
        guard let context = self.context else { return }

        let info = SessionInfo(
            sessionID: "\(configuration.serverName.split(separator: "/").first ?? "sb")-\(self.connectionID)-\(UInt32.random(in: 0...UInt32.max))",
            connectionID: self.connectionID, userID: userID, role: role, clientType: hello.clientType,
            deviceID: hello.deviceId, features: features, startedAtMs: now, grants: accepted.identity.grants,
            tokenID: accepted.identity.tokenID, tokenIssuedAt: accepted.identity.tokenIssuedAt)
        let session = SessionHandle(
            info: info, eventLoop: context.eventLoop, connection: self,
            maxSubscriptions: configuration.limits.maxSubscriptionsPerConnection)
        self.session = session
        self.machine.helloAccepted(heartbeatInterval: interval)
        self.handshakeTimer?.cancel()
        self.handshakeTimer = nil
        let limits = configuration.limits
        self.decoder.limits = FrameLimits(
            maxFrameSize: limits.maxFrameSize, maxInflatedSize: limits.maxInflatedSize,
            compressionEnabled: supportsCompression)
        if supportsCompression {
            self.encoder.compressionThreshold = configuration.compressionThreshold
            self.outbound.compressionAgreed()
        }
        if limits.requestsPerSecond > 0 {
            self.rateLimiter = TokenBucket(rate: limits.requestsPerSecond, burst: limits.requestBurst, now: .now())
        }
        let welcome = Welcome(
            protocolVersion: 1, features: features, sessionId: info.sessionID, userId: userID,
            maxFrameSize: UInt64(limits.maxFrameSize), maxInflatedSize: UInt64(limits.maxInflatedSize),
            maxInflight: UInt64(limits.maxInflight), heartbeatMs: UInt64(interval.nanoseconds / 1_000_000),
            heartbeatMisses: UInt64(configuration.heartbeat.misses), serverTimeMs: UInt64(max(now, 0)),
            compressThreshold: UInt64(configuration.compressionThreshold), serverName: configuration.serverName,
            isAdmin: role == .admin, requestsPerSecond: UInt64(limits.requestsPerSecond))
        self.send(.control(.welcome(welcome)))
        self.core.registry.register(session)
        self.core.metrics.sessions.increment()
        self.log(.debug, "session started", ["device": "\(hello.deviceId)", "client": "\(hello.clientType)"])
        for observer in self.core.observers { observer.sessionStarted(session) }
        self.startHeartbeatWatch(context: context)
        if let expiry = tokenExpiresAtMs { self.tokenRenewed(expiresAtMs: expiry) }
    }

    /// (Re)arms the end of the session at the token's expiry: GOAWAY 2002, reason `authExpired`, unless the client
    /// renews the token first (`renewToken`). The loop's deadline sweep (``checkDeadlines(now:)``) enforces it.
    func tokenRenewed(expiresAtMs: Int64) {
        guard let context = self.context, self.machine.isLoggedIn else { return }
        // SB-5.3-4: a serverNotice (2002, atMs = expiry) 60 s ahead, or at once (after this tick's replies) when
        // less time is left.
        if self.machine.tokenRenewed(expiresAtMs: expiresAtMs, nowMillis: self.core.nowMillis()) {
            context.eventLoop.assumeIsolated().execute { [weak self] in self?.checkDeadlines(now: .now()) }
        }
    }

    private func sendTokenNotice(expiresAtMs: Int64) {
        self.sendPush(
            .push(
                .serverNotice(
                    ServerNotice(
                        code: UInt64(ErrorCode.tokenExpired.rawValue), message: "the session's token expires soon",
                        atMs: UInt64(max(expiresAtMs, 0))))))
    }

    private func startHeartbeatWatch(context: ChannelHandlerContext) {
        // The loop's sweep checks the deadline (checkDeadlines); without one, a task per connection does.
        guard self.flushBatch == nil else { return }
        let interval = self.machine.heartbeatInterval
        let check = TimeAmount.nanoseconds(max(interval.nanoseconds / 4, 50_000_000))
        self.heartbeatTask = context.eventLoop.assumeIsolated().scheduleTask(in: check) { [weak self] in
            guard let self, self.machine.isLoggedIn else { return }
            self.checkDeadlines(now: .now())
            if self.machine.isLoggedIn { self.startHeartbeatWatch(context: context) }
        }
    }

    /// Ends a connection that sent no HELLO within the handshake timeout, or nothing for `misses` heartbeat
    /// intervals once logged in, or whose token expired (after the notice a minute ahead).
    func checkDeadlines(now: NIODeadline) {
        guard self.machine.isOpen else { return }
        // The server clock only when a token can expire (the sweep visits every connection).
        let nowMillis = self.machine.tokenExpiresAtMs == nil ? 0 : self.core.nowMillis()
        // The socket is asked only once HELLO is overdue (rare): a client whose bytes the loop has not read yet is
        // not timed out for the server's lateness.
        let firstBytesUnread = self.machine.handshakeOverdue(now: now) && self.firstBytesUnread
        let check = self.machine.deadlinesPassed(now: now, nowMillis: nowMillis, firstBytesUnread: firstBytesUnread)
        if firstBytesUnread, self.flushBatch == nil, let context = self.context {
            // Without the loop's sweep, the one handshake timer checks again shortly.
            self.handshakeTimer = context.eventLoop.assumeIsolated().scheduleTask(in: FlushBatch.sweepInterval) {
                [weak self] in self?.checkDeadlines(now: .now())
            }
        }
        if let expiry = check.tokenNoticeForExpiryAtMs { self.sendTokenNotice(expiresAtMs: expiry) }
        self.perform(check.action)
    }

    /// Whether the client sent bytes the server has not read at all yet: nothing reached the handler, reading is not
    /// held back on purpose (HELLO's verification: its time counts), and the socket holds unread bytes.
    private var firstBytesUnread: Bool {
        guard !self.readAny, self.input.decodes, let descriptor = self.descriptor else { return false }
        var unread: CInt = 0
        let result = withUnsafeMutablePointer(to: &unread) { ioctl(descriptor, UInt(FIONREAD), $0) }
        return result == 0 && unread > 0
    }

    // MARK: control and requests

    private func controlReceived(_ frame: Frame) {
        let message: SwitchboardMessage
        do {
            message = try SwitchboardMessage.decode(frame)
        } catch {
            self.fail(code: error.code, message: error.message, reason: .protocolError)
            return
        }
        switch message {
        case .control(.ping(let ping)):
            self.send(.control(.pong(Pong(nonce: ping.nonce))))
        case .control(.pong):
            break
        case .control(.goAway(let goAway)):
            // The client is leaving; code 0 is a normal close, like logout.
            self.perform(self.machine.peerSentGoAway(code: goAway.code))
        case .control(.hello):
            self.fail(code: .handshakeRequired, message: "HELLO after the handshake", reason: .protocolError)
        case .control(.welcome):
            self.fail(code: .badHeader, message: "clients may not send WELCOME", reason: .protocolError)
        default:
            break
        }
    }

    private func requestReceived(_ frame: Frame) {
        let requestID = frame.header.requestID
        let op = frame.header.op
        if case .reject(let code, let message) = self.machine.requestArrived(id: requestID) {
            if code == .tooManyInflight { self.core.metrics.recordLimitHit("maxInflight") }
            self.reject(requestID, op, code, message)
            return
        }
        let limits = self.core.configuration.limits
        let now = self.lastReceived
        if let wait = self.rateLimiter?.take(now: now) {
            self.core.metrics.recordLimitHit("requestsPerSecond")
            var body = ErrorBody(.rateLimited, "over \(limits.requestsPerSecond) requests per second")
            body.retryAfterMs = UInt64(max(1, wait.nanoseconds / 1_000_000))
            self.send(.error(id: requestID, op: op, body))
            self.core.metrics.recordError(.rateLimited)
            return
        }
        // Reads a command area answers straight from the encoded body (the plain case of a batch read), for
        // unrestricted sessions: a restricted one's request is decoded and checked against its grants below.
        if let reader = self.core.encodedReader(for: op), let operation = Opcode(rawValue: op), let session = self.session,
            session.info.grants.isUnrestricted, var buffer = self.takeOutputForAppending(capacity: 8192)
        {
            let hadOutput = buffer.readableBytes > 0
            var answer = EncodedAnswerOutput(
                header: FrameHeader(kind: .response, op: op, requestID: requestID), encoder: self.encoder,
                buffer: ByteBuffer())
            // Moved, not copied: the answer's buffer must be the only reference to the output, or appending to it
            // copies everything this read produced so far (quadratic over a pipelined batch).
            swap(&answer.buffer, &buffer)
            let answered = reader.answerEncoded(operation, body: frame.body, session: session, into: &answer)
            // A declined answer wrote nothing: an output made for it goes (an idle connection keeps no buffer).
            self.outbound.restorePending(answered || hadOutput ? answer.buffer : nil)
            if answered {
                self.core.metrics.recordRequest(op: op, nanoseconds: (NIODeadline.now() - now).nanoseconds)
                self.core.metrics.framesOut.increment()
                self.perform(self.outbound.flushRequested())
                return
            }
        }
        let request: Request
        do {
            guard case .request(_, let decoded) = try SwitchboardMessage.decode(frame) else { return }
            request = decoded
        } catch {
            self.frameError(error)
            return
        }
        guard let session = self.session, let context = self.context else { return }
        guard let handler = self.core.handler(for: request.operation) else {
            self.reject(requestID, op, .unavailable, "\(request.operation.name) is not available on this server")
            return
        }
        // Every request of a restricted session passes the op → permission table before an area sees it (SB-5.10-3).
        if !session.info.grants.isUnrestricted, let denied = RequestAuthorizer(session: session.info).check(request) {
            self.log(.debug, "request denied", ["op": "\(request.operation.name)", "needed": "\(denied.needed)"])
            let body = denied.errorBody
            self.core.metrics.recordError(body.errorCode)
            self.send(.error(id: requestID, op: op, body))
            return
        }
        self.machine.requestStarted(id: requestID, at: now)
        let requestContext = RequestContext(
            session: session, requestID: requestID,
            responder: Responder(
                requestID: requestID, op: op, connection: NIOLoopBound(self, eventLoop: context.eventLoop),
                eventLoop: context.eventLoop, inbox: self.inbox),
            nowMillis: self.requestNowMillis())
        switch handler.handle(request, context: requestContext) {
        case .response(let response):
            self.completeDeferred(id: requestID, .response(id: requestID, response))
        case .encodedResponse(let response):
            self.completeDeferred(id: requestID, encoded: response)
        case .failure(let error):
            self.completeDeferred(id: requestID, .error(id: requestID, op: op, error))
        case .deferred:
            break
        }
    }

    /// Server time for a request of the current read.
    private func requestNowMillis() -> Int64 {
        if let now = self.readNowMillis { return now }
        let now = self.core.nowMillis()
        self.readNowMillis = now
        return now
    }

    private func reject(_ requestID: UInt32, _ op: UInt8, _ code: ErrorCode, _ message: String) {
        self.core.metrics.recordError(code)
        self.send(.error(id: requestID, op: op, ErrorBody(code, message)))
    }

    /// Sends the one answer to request `id`; a second answer for the same id is dropped.
    func completeDeferred(id: UInt32, _ message: SwitchboardMessage) {
        guard let (started, next) = self.machine.answered(id: id) else { return }
        if case .error(_, _, let body) = message { self.core.metrics.recordError(body.errorCode) }
        self.core.metrics.recordRequest(op: message.header.op, nanoseconds: (NIODeadline.now() - started).nanoseconds)
        self.send(message)
        if case .logout = self.operation(of: message) {
            self.perform(self.machine.loggedOut())
            return
        }
        self.perform(next)
    }

    /// Sends the one answer to request `id` from a body encoded beforehand; a second answer for the same id is dropped.
    func completeDeferred(id: UInt32, encoded response: EncodedResponse) {
        guard let (started, next) = self.machine.answered(id: id) else { return }
        let op = response.operation.rawValue
        self.core.metrics.recordRequest(op: op, nanoseconds: (NIODeadline.now() - started).nanoseconds)
        self.sendEncoded(FrameHeader(kind: .response, op: op, requestID: id), body: response.body)
        self.perform(next)
    }

    private func operation(of message: SwitchboardMessage) -> Opcode? {
        if case .response(_, let response) = message { return response.operation }
        return nil
    }

    // MARK: writing

    /// Appends a frame to this tick's output.
    func send(_ message: SwitchboardMessage) {
        guard self.machine.isOpen, let context = self.context else { return }
        let tick = self.outbound.append(capacity: 256, allocator: context.channel.allocator) {
            self.encoder.encode(message, into: &$0)
        }
        self.core.metrics.framesOut.increment()
        self.perform(tick)
    }

    /// This tick's output, taken out of `self` so that it stays uniquely referenced while the caller appends to it
    /// (the caller puts it back); nil once the connection is closed.
    private func takeOutputForAppending(capacity: Int) -> ByteBuffer? {
        guard self.machine.isOpen, let context = self.context else { return nil }
        return self.outbound.takeForAppending(capacity: capacity, allocator: context.channel.allocator)
    }

    /// Appends a frame whose body was encoded beforehand to this tick's output.
    private func sendEncoded(_ header: FrameHeader, body: ByteBuffer) {
        guard self.machine.isOpen, let context = self.context else { return }
        let tick = self.outbound.append(capacity: body.readableBytes + 16, allocator: context.channel.allocator) {
            self.encoder.encode(header: header, body: body, into: &$0)
        }
        self.core.metrics.framesOut.increment()
        self.perform(tick)
    }

    func sendPush(_ message: SwitchboardMessage) {
        guard self.machine.isLoggedIn, let context = self.context else { return }
        self.outbound.pushStarted()
        defer { self.outbound.pushFinished() }
        switch self.outbound.pushArrived(encodedBytes: nil, generation: self.flushBatch?.generation) {
        case .hold:
            var frame = context.channel.allocator.buffer(capacity: 256)
            self.encoder.encode(message, into: &frame)
            self.hold(frame)
        case .sendDirectly:
            // A push to an idle connection (a provider's request, an event to one subscriber) leaves at once, as an
            // encoded push does, instead of at the end of a tick that may be busy with other connections for a while.
            // (Deferred answers still gather until the end of the tick: a store's group commit completes many
            // answers of one connection together, and one send for them all is worth more there.)
            var frame = context.channel.allocator.buffer(capacity: 256)
            self.encoder.encode(message, into: &frame)
            self.sendDirectlyNow(frame)
        case .append, .writeToChannel:
            self.send(message)
        }
    }

    func sendEncodedPush(_ push: EncodedPush) {
        guard self.machine.isLoggedIn else { return }
        self.outbound.pushStarted()
        defer { self.outbound.pushFinished() }
        let frame = self.outbound.frame(plain: push.plain, compressed: push.compressed)
        switch self.outbound.pushArrived(encodedBytes: frame.readableBytes, generation: self.flushBatch?.generation) {
        case .hold:
            self.hold(frame)
        case .sendDirectly:
            // The fan-out case: nothing else waits to leave this connection, so the push goes to the socket at once
            // (one send, no trip through the channel).
            self.sendDirectlyNow(frame)
        case .writeToChannel(let pending):
            // The one encoded buffer itself, shared by every receiving connection, instead of a copy per
            // connection: a large push is held once however many slow readers it waits for, and a push to an idle
            // connection (the fan-out case) costs no buffer of its own.
            guard let context = self.context else { return }
            if let pending {
                context.write(self.wrapOutboundOut(pending), promise: nil)
                self.core.metrics.bytesOut.increment(by: Int64(pending.readableBytes))
            }
            context.write(self.wrapOutboundOut(frame), promise: nil)
            self.core.metrics.bytesOut.increment(by: Int64(frame.readableBytes))
            self.core.metrics.framesOut.increment()
            self.perform(self.outbound.flushRequested())
        case .append:
            // A small push behind other output is copied into it, to leave in the same write.
            guard let context = self.context else { return }
            let tick = self.outbound.append(capacity: frame.readableBytes, allocator: context.channel.allocator) {
                $0.writeImmutableBuffer(frame)
            }
            self.core.metrics.framesOut.increment()
            self.perform(tick)
        }
    }

    /// Sends `frame` to the socket now (the output path routed it there); what the socket does not take goes to
    /// the channel.
    private func sendDirectlyNow(_ frame: ByteBuffer) {
        guard let socket = self.socket, let batch = self.flushBatch else { return }
        batch.advanceGenerationAtEndOfTick()
        self.core.metrics.bytesOut.increment(by: Int64(frame.readableBytes))
        self.core.metrics.framesOut.increment()
        // The context only if the socket does not take it all: a fan-out touches as few objects per connection as
        // it can (each is a cache miss).
        let sent = socket.send(frame)
        if sent != frame.readableBytes, let context = self.context {
            self.handToChannel(frame, after: sent, context: context)
        }
    }

    /// Schedules the end-of-tick flush if the output path asked for it.
    private func perform(_ action: OutboundStateMachine.TickAction) {
        guard case .scheduleFlush = action else { return }
        if let batch = self.flushBatch {
            batch.add(self)
            return
        }
        self.context?.eventLoop.assumeIsolated().execute { [weak self] in
            self?.flushScheduledOutput()
        }
    }

    /// Writes what the tick left in the output (called at the end of the tick that scheduled it).
    func flushScheduledOutput() {
        self.outbound.scheduledFlushStarted()
        self.flushOutput()
    }

    /// Writes what the output path says is due, then applies the limits to what waits to leave.
    private func flushOutput() {
        guard let context = self.context else { return }
        switch self.outbound.flushDue() {
        case .none:
            return
        case .checkQueue:
            break
        case .sendDirectly(let output):
            self.core.metrics.bytesOut.increment(by: Int64(output.readableBytes))
            if let socket = self.socket { self.writeDirectly(output, to: socket, context: context) }
        case .flushChannel(let output):
            if let output {
                self.core.metrics.bytesOut.increment(by: Int64(output.readableBytes))
                context.write(self.wrapOutboundOut(output), promise: nil)
            }
            self.flushChannel(context: context)
        }
        self.checkOutboundQueue(context: context)
    }

    /// Sends `buffer` on the socket; what the socket does not take goes to the channel, and output after it
    /// follows through the channel until the channel has written it all.
    private func writeDirectly(_ buffer: ByteBuffer, to socket: DirectSocketWriter, context: ChannelHandlerContext) {
        let sent = socket.send(buffer)
        if sent == buffer.readableBytes { return }
        self.handToChannel(buffer, after: sent, context: context)
    }

    /// Hands what the socket did not take of `buffer` (`sent` bytes went out; nil: an error) to the channel.
    private func handToChannel(_ buffer: ByteBuffer, after sent: Int?, context: ChannelHandlerContext) {
        var rest = buffer
        if let sent, sent > 0 { rest.moveReaderIndex(forwardBy: sent) }
        // On an error (sent == nil) the channel meets it again when it writes, and closes the connection.
        context.write(self.wrapOutboundOut(rest), promise: nil)
        self.flushChannel(context: context)
    }

    /// Flushes the channel. With a known socket, counts the flush until the channel has written everything handed
    /// to it so far (the promise of an empty write behind it completes then), so direct writes cannot overtake it.
    private func flushChannel(context: ChannelHandlerContext) {
        guard self.outbound.channelFlushStarted() else {
            context.flush()
            return
        }
        let written = context.eventLoop.makePromise(of: Void.self)
        context.write(self.wrapOutboundOut(ByteBuffer()), promise: written)
        context.flush()
        written.futureResult.assumeIsolated().whenComplete { _ in self.outbound.channelFlushCompleted() }
    }

    /// Applies the high-water mark and the hard cap to what waits to leave (held pushes and the channel's buffer).
    private func checkOutboundQueue(context: ChannelHandlerContext) {
        // Nothing held, reading not stopped and the channel under its write window: nothing to change (the common
        // case, without asking the channel for its buffered bytes at every flush).
        guard self.outbound.queueCheckNeeded, self.machine.isOpen else { return }
        let action = self.outbound.queueMeasured(
            channelBufferedBytes: self.channelBufferedBytes(context: context), applyingHardCap: true)
        self.perform(action, context: context)
    }

    private func sendGoAway(code: UInt32, reason: SessionEndReason, message: String) {
        self.send(
            .control(
                .goAway(
                    GoAway(
                        code: UInt64(code), message: message, lastRequestId: UInt64(self.machine.highestRequestID),
                        reason: reason))))
    }

    // MARK: ending

    /// Sends GOAWAY with `code` and closes.
    func disconnect(code: ErrorCode, reason: SessionEndReason, message: String) {
        guard self.machine.isOpen else { return }
        self.fail(code: code, message: message, reason: reason)
    }

    private func fail(code: ErrorCode, message: String, reason: SessionEndReason) {
        guard self.machine.failing(reason: reason) else { return }
        self.core.metrics.recordError(code)
        self.log(.debug, "closing connection", ["code": "\(code)", "message": "\(message)"])
        self.sendGoAway(code: code.rawValue, reason: reason, message: message)
        self.closeConnection()
    }

    /// Ends the session and closes the connection without losing its last frames (SB-5.8-5): what is pending (a
    /// response, GOAWAY) is written, then the server shuts down its sending side and reads and discards until the
    /// client closes. Closing with unread client bytes in the socket would reset the connection, and a reset can
    /// drop the GOAWAY from the client's receive queue before it is read. A client that does not close (or does
    /// not read) within ``closingGracePeriod`` is closed then.
    private func closeConnection() {
        guard let context = self.context, self.machine.closing() else { return }
        self.heartbeatTask?.cancel()
        self.cumulation = nil
        // Pushes still held are dropped: the session ends, and GOAWAY is the last frame. The last write (possibly
        // empty, behind shared pushes already written) completes when all of it is out.
        let output = self.outbound.closed() ?? context.channel.allocator.buffer(capacity: 0)
        self.endSession()
        self.core.metrics.bytesOut.increment(by: Int64(output.readableBytes))
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(self.wrapOutboundOut(output), promise: written)
        self.closingDeadline = context.eventLoop.assumeIsolated().scheduleTask(in: Self.closingGracePeriod) {
            context.close(promise: nil)
        }
        written.futureResult.assumeIsolated().whenComplete { result in
            guard case .success = result else {
                context.close(promise: nil)
                return
            }
            // FIN after the last frame; the read side stays open until the client closes or the grace period ends.
            let halfClosed = context.eventLoop.makePromise(of: Void.self)
            context.close(mode: .output, promise: halfClosed)
            halfClosed.futureResult.assumeIsolated().whenFailure { _ in context.close(promise: nil) }
        }
        // Keep reading (and discarding) whatever the client still sends.
        self.perform(self.input.closing(), context: context)
    }

    /// Graceful shutdown: tell the client, answer what is in flight, then close.
    func drain() {
        self.perform(self.machine.shutdownRequested())
    }

    /// End of the shutdown grace period: close whatever is still open (a connection still waiting for its client to
    /// close, too).
    func forceClose() {
        self.perform(self.machine.shutdownGraceEnded())
    }
}

@available(*, unavailable)
extension ConnectionHandler: Sendable {}

