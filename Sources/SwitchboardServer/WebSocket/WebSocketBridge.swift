#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOWebSocket
import SwitchboardWire

/// Carries a connection's frames in binary WebSocket messages (`Protocol/SPEC.md` §2.5): between NIO's WebSocket
/// codec and the connection's ``ConnectionHandler``, which sees the same byte stream as on TCP.
///
/// - Inbound, each binary message's bytes are handed on as one read, after a check that they hold whole frames
///   only (a message that ends inside a frame is a protocol error, GOAWAY `1011`); a text message is a protocol
///   error (GOAWAY `1004`, close code 1003); a message over the size limit is GOAWAY `1001` (close code 1009). A
///   WebSocket ping is answered with a pong, and counts for nothing else: the protocol's own heartbeats (PING
///   frames) keep a session alive. The client's close frame is the end of its input, as a TCP FIN is.
/// - Outbound, every write of the connection handler (whole frames: a tick's answers, a push) is one binary
///   message. The connection handler's half-close after its last frame (GOAWAY) sends a close frame first; once
///   both sides sent theirs the connection is closed.
/// - Without TLS the connection handler sends to the socket directly, as on TCP, through ``sendDirectly(_:on:)``:
///   one `sendmsg` of the message's header and bytes, no trip through the pipeline per push (a fan-out to
///   thousands of WebSocket subscribers costs what it costs on TCP plus the header). Everything else (pongs, close
///   frames, what the socket did not take) goes through NIO's `WebSocketFrameEncoder`.
final class WebSocketBridge: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = WebSocketFrame

    /// The connection's handler, told to end the session with a GOAWAY when the client breaks the WebSocket rules.
    weak var connection: ConnectionHandler?
    /// The context of NIO's frame encoder: bytes that are already framed (the rest of a message sent directly in
    /// part) are written from there, past the encoder.
    private var encoderContext: ChannelHandlerContext?
    /// Set after a direct send that the socket took only in part: the message header's bytes it did not take. The
    /// connection handler's next write is the rest of that message, which goes out behind them as it is.
    private var continuation: ByteBuffer?
    /// The bridge's own writes (pongs) not yet written: direct sends wait for them.
    private var ownWritesPending = 0
    /// The largest message accepted (for the GOAWAY's message).
    private let maxMessageSize: Int
    private var closeSent = false
    private var closeReceived = false
    /// The close code of the close frame the gateway sends: 1000 unless the client broke a WebSocket rule.
    private var closeCode = WebSocketErrorCode.normalClosure
    /// The client broke a rule: further errors of the codec (which stops decoding) are expected.
    private var violated = false

    init(maxMessageSize: Int) {
        self.maxMessageSize = maxMessageSize
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.encoderContext = try? context.pipeline.syncOperations.context(handlerType: WebSocketFrameEncoder.self)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.encoderContext = nil
    }

    // MARK: inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        switch frame.opcode {
        case .binary:
            guard !self.closeReceived, !self.violated else { return }
            let bytes = frame.unmaskedData
            guard Self.holdsWholeFrames(bytes) else {
                self.violation(
                    .truncatedFrame, close: .protocolError,
                    "a WebSocket message ended inside a frame: a message holds whole frames only")
                return
            }
            guard bytes.readableBytes > 0 else { return }
            context.fireChannelRead(self.wrapInboundOut(bytes))
        case .text:
            self.violation(
                .badHeader, close: .unacceptableData, "text messages are not accepted: frames go in binary messages")
        case .ping:
            guard !self.closeSent else { return }
            let pong = WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)
            self.ownWritesPending += 1
            let written = context.eventLoop.makePromise(of: Void.self)
            context.writeAndFlush(self.wrapOutboundOut(pong), promise: written)
            written.futureResult.assumeIsolated().whenComplete { _ in self.ownWritesPending -= 1 }
        case .connectionClose:
            guard !self.closeReceived else { return }
            self.closeReceived = true
            if self.closeSent {
                context.close(promise: nil)  // the closing handshake is complete
            } else {
                // The end of the client's input, as a FIN on TCP: the connection handler answers what is due, then
                // closes (and the close frame goes out then).
                context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
            }
        default:
            break  // pong, and continuations (the aggregator joins them)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch error {
        case NIOWebSocketError.invalidFrameLength, NIOWebSocketFrameAggregator.Error.accumulatedFrameSizeIsTooLarge:
            self.violation(
                .frameTooLarge, close: .messageTooLarge, "a WebSocket message over the limit of \(self.maxMessageSize) bytes")
        case is NIOWebSocketError, is NIOWebSocketFrameAggregator.Error:
            self.violation(.badHeader, close: .protocolError, "WebSocket protocol error: \(error)")
        default:
            if self.violated { return }  // the codec refuses what follows a broken message
            context.fireErrorCaught(error)
        }
    }

    /// Ends the session for a message that breaks the rules: GOAWAY `code`, then a close frame with `close`.
    private func violation(_ code: ErrorCode, close: WebSocketErrorCode, _ message: String) {
        guard !self.violated else { return }
        self.violated = true
        self.closeCode = close
        self.connection?.disconnect(code: code, reason: .protocolError, message: message)
    }

    /// Whether `bytes` are whole frames: each length prefix complete, and each frame's bytes inside the message. A
    /// length prefix longer than 4 bytes is left to the frame decoder, which refuses it (1005).
    static func holdsWholeFrames(_ bytes: ByteBuffer) -> Bool {
        var index = bytes.readerIndex
        let end = bytes.writerIndex
        while index < end {
            var length = 0
            var shift = 0
            var prefix = 0
            while true {
                guard index + prefix < end, let byte = bytes.getInteger(at: index + prefix, as: UInt8.self) else {
                    return false  // the message ends inside the length prefix
                }
                prefix += 1
                length |= Int(byte & 0x7F) << shift
                if byte & 0x80 == 0 { break }
                shift += 7
                if prefix == 4 { return true }  // malformed: the decoder reports it
            }
            index += prefix + length
        }
        return index == end
    }

    // MARK: outbound

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let bytes = self.unwrapOutboundIn(data)
        guard !self.closeSent else {
            promise?.fail(ChannelError.outputClosed)
            return
        }
        if var framed = self.continuation {
            // The rest of a message sent directly in part.
            self.continuation = nil
            framed.writeImmutableBuffer(bytes)
            self.writeFramed(framed, context: context, promise: promise)
            return
        }
        guard bytes.readableBytes > 0 else {
            // An empty write, whose promise tells the connection handler when everything before it is written.
            self.writeFramed(bytes, context: context, promise: promise)
            return
        }
        context.write(self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .binary, data: bytes)), promise: promise)
    }

    /// Writes bytes that need no framing past the encoder, behind everything written before.
    private func writeFramed(_ bytes: ByteBuffer, context: ChannelHandlerContext, promise: EventLoopPromise<Void>?) {
        guard let encoder = self.encoderContext else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        encoder.write(NIOAny(bytes), promise: promise)
    }

    /// Sends `bytes` as one binary message on the socket `descriptor` (the connection handler's direct send): the
    /// header and the bytes in one `sendmsg`.
    ///
    /// - Returns: how many of `bytes` the socket took (0 when it took none, or only part of the header: then the
    ///   header's rest goes out before the bytes the connection handler writes next, see ``continuation``); nil on
    ///   an error, as ``DirectSocketWriter/send(_:)``.
    func sendDirectly(_ bytes: ByteBuffer, on descriptor: CInt) -> Int? {
        // Nothing may overtake the bridge's own writes, and nothing goes after its close frame.
        guard self.ownWritesPending == 0, !self.closeSent, self.continuation == nil, bytes.readableBytes > 0 else {
            return 0
        }
        let count = bytes.readableBytes
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 10) { header in
            // RFC 6455 §5.2: FIN and the binary opcode; no mask (server to client); the length in 7, 16 or 64 bits.
            header[0] = 0x82
            var headerLength = 2
            if count < 126 {
                header[1] = UInt8(count)
            } else if count <= 0xFFFF {
                header[1] = 126
                header[2] = UInt8(count >> 8)
                header[3] = UInt8(count & 0xFF)
                headerLength = 4
            } else {
                header[1] = 127
                for index in 0..<8 { header[2 + index] = UInt8((UInt64(count) >> (56 - 8 * UInt64(index))) & 0xFF) }
                headerLength = 10
            }
            let sent = bytes.withUnsafeReadableBytes { payload -> Int in
                withUnsafeTemporaryAllocation(of: iovec.self, capacity: 2) { vectors in
                    vectors[0] = iovec(iov_base: UnsafeMutableRawPointer(header.baseAddress), iov_len: headerLength)
                    vectors[1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: payload.baseAddress), iov_len: count)
                    var message = msghdr()
                    message.msg_iov = vectors.baseAddress
                    message.msg_iovlen = 2
                    while true {
                        let sent = sendmsg(descriptor, &message, Int32(MSG_NOSIGNAL))
                        if sent >= 0 || errno != EINTR { return sent }
                    }
                }
            }
            if sent < 0 { return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : nil }
            if sent >= headerLength {
                if sent < headerLength + count { self.continuation = ByteBuffer() }
                return sent - headerLength
            }
            if sent > 0 {
                self.continuation = ByteBuffer(bytes: UnsafeBufferPointer(rebasing: header[sent..<headerLength]))
            }
            return 0
        }
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard !self.closeSent, mode != .input else {
            context.close(mode: mode, promise: promise)
            return
        }
        self.closeSent = true
        var payload = context.channel.allocator.buffer(capacity: 2)
        payload.write(webSocketErrorCode: self.closeCode)
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)
        if mode == .all {
            context.writeAndFlush(self.wrapOutboundOut(frame), promise: nil)
            context.close(mode: .all, promise: promise)
            return
        }
        // The half-close after the last frame: the close frame goes behind everything written, then the FIN; when
        // the client's close frame came already, the connection ends there (RFC 6455 §7.1.1: the server closes
        // first).
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(self.wrapOutboundOut(frame), promise: written)
        written.futureResult.assumeIsolated().whenComplete { _ in
            context.close(mode: self.closeReceived ? .all : .output, promise: promise)
        }
    }
}

@available(*, unavailable)
extension WebSocketBridge: Sendable {}
