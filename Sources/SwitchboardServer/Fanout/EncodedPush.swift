import NIOCore
import SwitchboardWire

/// A push encoded once (plain, and compressed when it is large) and written to many sessions.
public final class EncodedPush: Sendable {
    /// The frame without compression.
    public let plain: ByteBuffer
    /// The frame compressed, when the body is at least the threshold and zlib made it smaller.
    public let compressed: ByteBuffer?

    /// Encodes `push` for fan-out.
    public init(_ push: Push, compressionThreshold: Int = FrameEncoder.defaultCompressionThreshold) {
        var plain = ByteBuffer()
        FrameEncoder().encode(.push(push), into: &plain)
        self.plain = plain
        if SwitchboardMessage.push(push).bodySize >= compressionThreshold {
            var compressed = ByteBuffer()
            FrameEncoder(compressionThreshold: compressionThreshold).encode(.push(push), into: &compressed)
            self.compressed = compressed.readableBytes < plain.readableBytes ? compressed : nil
        } else {
            self.compressed = nil
        }
    }
}

extension EncodedPush {
    /// Sends the push to every session in `sessions`: at once to those on the calling thread's event loop, and with
    /// one task per other event loop for the rest (not one task per session: a fan-out to thousands of sessions on
    /// another loop would otherwise queue thousands of cross-thread tasks).
    func send(to sessions: some Sequence<SessionHandle>) {
        var elsewhere: [(loop: any EventLoop, sessions: [SessionHandle])] = []
        // Sessions on the calling thread's loop (the common case: one loop, or a fan-out from a connection's own
        // request) are told apart by the loop's identity, asking the current loop only once.
        var here: (any EventLoop)?
        for session in sessions {
            if let here, session.eventLoop === here {
                session.sendOnItsLoop(self)
            } else if here == nil, session.eventLoop.inEventLoop {
                here = session.eventLoop
                session.sendOnItsLoop(self)
            } else if let index = elsewhere.firstIndex(where: { $0.loop === session.eventLoop }) {
                elsewhere[index].sessions.append(session)
            } else {
                elsewhere.append((session.eventLoop, [session]))
            }
        }
        for (loop, targets) in elsewhere {
            loop.execute { for session in targets { session.sendOnItsLoop(self) } }
        }
    }
}
