import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization

/// A TLS connection to a gateway that hands back the frames as they came over the wire (compressed or not), for
/// tests that check what the gateway sent through TLS rather than what a client made of it.
final class TLSFrameClient: Sendable {
    private let channel: any Channel
    private let collector: FrameCollector

    private init(channel: any Channel, collector: FrameCollector) {
        self.channel = channel
        self.collector = collector
    }

    /// Connects to `127.0.0.1:port` with TLS, trusting the test CA.
    static func connect(port: Int) async throws -> TLSFrameClient {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.trustRoots = .file(TLSFixtures.caCertificatePath)
        let context = try NIOSSLContext(configuration: configuration)
        let collector = FrameCollector()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        try NIOSSLClientHandler(context: context, serverHostname: nil))
                    try channel.pipeline.syncOperations.addHandler(FrameCollectingHandler(collector: collector))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        return TLSFrameClient(channel: channel, collector: collector)
    }

    /// Sends `message` as one frame.
    func send(_ message: SwitchboardMessage) async throws {
        var buffer = self.channel.allocator.buffer(capacity: 256)
        FrameEncoder().encode(message, into: &buffer)
        try await self.channel.writeAndFlush(buffer)
    }

    /// The next frame not yet taken, waiting at most `seconds`; nil when none came.
    func nextFrame(seconds: Double = 10) async -> Frame? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let frame = self.collector.take() { return frame }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return self.collector.take()
    }

    func close() async {
        try? await self.channel.close()
    }
}

/// The frames a ``FrameCollectingHandler`` decoded, in order.
private final class FrameCollector: Sendable {
    private let frames = Mutex<[Frame]>([])

    func add(_ frame: Frame) {
        self.frames.withLock { $0.append(frame) }
    }

    func take() -> Frame? {
        self.frames.withLock { $0.isEmpty ? nil : $0.removeFirst() }
    }
}

private final class FrameCollectingHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let collector: FrameCollector
    private var decoder = FrameDecoder(direction: .serverToClient)
    private var pending = ByteBuffer()

    init(collector: FrameCollector) {
        self.collector = collector
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = Self.unwrapInboundIn(data)
        self.pending.writeBuffer(&bytes)
        do {
            while let frame = try self.decoder.decodeFrame(from: &self.pending) { self.collector.add(frame) }
        } catch {
            context.close(promise: nil)
        }
    }
}
