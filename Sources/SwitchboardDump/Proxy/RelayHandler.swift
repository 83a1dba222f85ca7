import NIOCore

/// One end of a proxied connection: hands every byte it reads to its partner (the other end) unchanged, flushes,
/// and only then lets the tap decode a copy, so decoding never delays the bytes.
///
/// Both ends of a connection live on the same event loop. Reading follows the partner's writability, so a slow
/// receiver slows the sender down instead of filling the proxy's memory. An end whose peer stops sending (half
/// close) shuts down the partner's output once the partner has written everything; an end that closes makes the
/// partner close once it has written everything.
///
/// The client end exists before its partner: until the upstream connection is up it does not ask to read, but a
/// peer that sends and closes at once is read anyway (the end of input makes the channel drain the socket). Such
/// early bytes, and an early end, are kept and handed on when the two ends are paired.
final class RelayHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// The side of the connection this end talks to.
    let side: ConnectionSide
    private let tap: ConnectionTap
    private var partner: RelayHandler?
    private var context: ChannelHandlerContext?
    private var pendingRead = false
    /// Bytes forwarded in the current read burst, with the time they were read, for the tap once they are flushed.
    private var unobserved: [(bytes: ByteBuffer, time: NIODeadline, wallTime: WallClockTime)] = []
    /// Whether this end's channel has closed.
    private(set) var isClosed = false
    /// Completes when the last forwarded write has (writes complete in order, so: when all of them have).
    private var lastWrite: EventLoopFuture<Void>?
    /// Bytes read before there was a partner to forward them to.
    private var unforwarded: [ByteBuffer] = []
    /// Whether this end's peer stopped sending.
    private var inputEnded = false

    init(side: ConnectionSide, tap: ConnectionTap) {
        self.side = side
        self.tap = tap
    }

    /// The direction of the bytes this end reads.
    private var direction: StreamDirection { self.side == .client ? .clientToServer : .serverToClient }

    /// Joins two ends: each hands on what it read or saw end before, then reads as soon as the other can write.
    static func pair(_ first: RelayHandler, _ second: RelayHandler) {
        first.partner = second
        second.partner = first
        first.handOnEarlyInput()
        second.handOnEarlyInput()
        first.readIfPending()
        second.readIfPending()
    }

    private func handOnEarlyInput() {
        guard let partner = self.partner else { return }
        for bytes in self.unforwarded { partner.forward(bytes) }
        self.unforwarded.removeAll()
        partner.flushForwarded()
        self.observeForwarded()
        if self.isClosed {
            self.partner = nil
            partner.closeWhenWritten()
        } else if self.inputEnded {
            partner.shutdownOutputWhenWritten()
        }
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        self.partner = nil
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = Self.unwrapInboundIn(data)
        if let partner = self.partner {
            partner.forward(bytes)
        } else {
            self.unforwarded.append(bytes)
        }
        self.unobserved.append((bytes, .now(), .now()))
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        self.partner?.flushForwarded()
        self.observeForwarded()
        context.fireChannelReadComplete()
    }

    /// Lets the tap decode what was forwarded; bytes waiting for a partner wait to be decoded too.
    private func observeForwarded() {
        guard self.partner != nil else { return }
        let burst = self.unobserved
        self.unobserved.removeAll(keepingCapacity: true)
        for read in burst {
            self.tap.observe(read.bytes, from: self.direction, at: read.time, wallTime: read.wallTime)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { self.partner?.readIfPending() }
        context.fireChannelWritabilityChanged()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            self.inputEnded = true
            self.partner?.flushForwarded()
            self.observeForwarded()
            self.tap.sideEnded(self.side)
            self.partner?.shutdownOutputWhenWritten()
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.isClosed = true
        self.partner?.flushForwarded()
        self.observeForwarded()
        self.tap.sideInactive(self.side)
        self.partner?.closeWhenWritten()
        self.partner = nil
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A reset or a failed write: this end is over; channelInactive tells the partner.
        context.close(promise: nil)
    }

    // MARK: Outbound

    func read(context: ChannelHandlerContext) {
        if let partner = self.partner, partner.isWritable {
            context.read()
        } else {
            self.pendingRead = true
        }
    }

    // MARK: Called by the partner

    private var isWritable: Bool { self.context?.channel.isWritable ?? false }

    private func forward(_ bytes: ByteBuffer) {
        guard let context = self.context else { return }
        let written = context.eventLoop.makePromise(of: Void.self)
        context.write(Self.wrapOutboundOut(bytes), promise: written)
        self.lastWrite = written.futureResult
    }

    /// Runs `body` once every forwarded byte is written (or failed to be, the channel being gone).
    private func whenWritten(_ context: ChannelHandlerContext, _ body: @escaping () -> Void) {
        context.flush()
        guard let lastWrite = self.lastWrite else { return body() }
        lastWrite.assumeIsolated().whenComplete { _ in body() }
    }

    private func flushForwarded() {
        self.context?.flush()
    }

    private func readIfPending() {
        guard self.pendingRead, let context = self.context, let partner = self.partner, partner.isWritable else {
            return
        }
        self.pendingRead = false
        context.read()
    }

    /// The partner's peer stops sending: once everything forwarded is written, tell this end's peer the same.
    private func shutdownOutputWhenWritten() {
        guard let context = self.context else { return }
        // Waiting for the writes matters: on a channel whose input is already closed, close(mode: .output) becomes
        // a full close, which would drop writes still pending.
        self.whenWritten(context) {
            context.close(mode: .output).assumeIsolated().whenFailure { _ in
                context.close(promise: nil)
            }
        }
    }

    /// The partner is gone: write what was forwarded, then close.
    func closeWhenWritten() {
        guard let context = self.context else { return }
        self.whenWritten(context) { context.close(promise: nil) }
    }
}
