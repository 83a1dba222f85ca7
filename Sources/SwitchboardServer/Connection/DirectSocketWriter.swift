#if canImport(Glibc)
import Glibc
#endif
import NIOCore

/// Sends a connection's output on its socket directly, without NIO's pipeline and write queue.
///
/// The ``ConnectionHandler`` uses it only while the channel holds none of the connection's output (so bytes leave in
/// order) and only on the channel's event loop (where NIO also reads, writes and closes the socket, so the
/// descriptor is the connection's own for as long as the handler has not seen `channelInactive`). What the socket
/// does not take goes to the channel, which writes it when the socket has room.
///
/// On a plain WebSocket connection each send is one binary message, framed by the connection's
/// ``WebSocketBridge`` (see ``WebSocketBridge/sendDirectly(_:on:)``).
struct DirectSocketWriter {
    /// The connected socket.
    let descriptor: CInt
    /// The bridge of a WebSocket connection, which frames what is sent; nil on TCP and Unix sockets.
    var webSocket: WebSocketBridge? = nil

    /// Sends as much of `buffer` as the socket takes now.
    ///
    /// - Returns: the bytes of `buffer` sent (0 when the socket is full); nil on an error, which the caller leaves
    ///   to the channel to meet again and handle (a reset peer, a closed socket). What was not sent the caller
    ///   hands to the channel.
    func send(_ buffer: ByteBuffer) -> Int? {
        if let webSocket { return webSocket.sendDirectly(buffer, on: self.descriptor) }
        return buffer.withUnsafeReadableBytes { bytes in
            while true {
                // MSG_NOSIGNAL: a peer that went away is an EPIPE here, not a SIGPIPE for the process.
                let sent = Glibc.send(self.descriptor, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
                if sent >= 0 { return sent }
                switch errno {
                case EINTR: continue
                case EAGAIN, EWOULDBLOCK: return 0
                default: return nil
                }
            }
        }
    }
}
