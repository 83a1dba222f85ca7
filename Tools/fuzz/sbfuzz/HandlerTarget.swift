import Dispatch
import Foundation
import Logging
import NIOCore
import NIOEmbedded
import SwitchboardServer
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// The request handler target: the input is what one client sends after its HELLO, delivered to the gateway's
/// real ``ConnectionHandler`` with the real storage, presence, event and profile areas over SQLite stores in a
/// temporary directory.
///
/// Input format: the first byte is the read size (0: the rest arrives in one read; n: reads of n bytes), the rest is
/// the client's byte stream. Crashes and traps are findings; error answers and GOAWAYs are the gateway doing its
/// job. Every byte the gateway writes must be a valid server frame (checked; a violation traps).
///
/// The handler is hosted in a `NIOAsyncTestingChannel` (NIO's thread-safe embedded channel): the event and profile
/// stores answer from their writer threads, which `EmbeddedEventLoop` does not allow. One gateway serves every
/// input of the process; each input logs in as a fresh user, and the loop's clock moves 2 s per input, so heartbeat,
/// presence and provider timers fire as the run goes on.
final class HandlerTarget: Sendable {
    /// The gateway every input of this process goes to (made on first use).
    static let shared: HandlerTarget = {
        LoggingSystem.bootstrap { _ in SwiftLogNoOpLogHandler() }
        do {
            let target = try HandlerTarget()
            atexit { HandlerTarget.shared.removeFiles() }
            return target
        } catch {
            fatalError("the handler target's gateway did not start: \(error)")
        }
    }()

    private let loop = NIOAsyncTestingEventLoop()
    private let connections: ConnectionHandlerFactory
    private let eventStore: EventStore
    private let profileStore: ProfileStore
    private let inputs = Atomic<UInt64>(0)
    /// The directory of the SQLite files (SBFUZZ_DIRECTORY, else one per process in /dev/shm or the temporary
    /// directory), removed at exit.
    let directory: URL

    private init() throws {
        if let given = ProcessInfo.processInfo.environment["SBFUZZ_DIRECTORY"] {
            self.directory = URL(fileURLWithPath: given)
        } else {
            let shared = URL(fileURLWithPath: "/dev/shm")
            let parent = FileManager.default.fileExists(atPath: shared.path) ? shared : FileManager.default.temporaryDirectory
            self.directory = parent.appendingPathComponent("sbfuzz-handlers-\(ProcessInfo.processInfo.processIdentifier)")
        }
        try? FileManager.default.removeItem(at: self.directory)
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true)
        let database = self.directory.appendingPathComponent("fuzz.sqlite").path

        // Built by the gateway's own application, with its defaults except where noted.
        var configuration = GatewayApplication.Configuration()
        configuration.server.tcpHost = nil
        configuration.server.unixSocketPath = nil
        configuration.useDatabase(at: database)
        configuration.store.durability = .acknowledgeAfterCommit
        configuration.store.commitDriver = .caller  // as with one event loop thread
        // No delay for writes nobody waits for: each input's writes are flushed before the next input.
        configuration.unawaitedWriteDelayMs = 0
        // A provider timeout shorter than the 2 s the clock moves per input, so unanswered provider reads time out.
        configuration.providerTimeout = .seconds(1)
        let logger = Logger(label: "sbfuzz")
        let application = GatewayApplication(configuration: configuration, logger: logger)
        let services = try application.makeServices(eventLoopGroup: self.loop)
        guard let eventStore = services.eventStore, let profileStore = services.profileStore else {
            throw FuzzSetupError(description: "the application built no event or profile store")
        }
        self.eventStore = eventStore
        self.profileStore = profileStore
        self.connections = ConnectionHandlerFactory(
            configuration: configuration.server, handlers: services.handlers, observers: services.observers,
            registry: services.sessions, eventLoops: self.loop, logger: logger)
    }

    /// A gateway the target could not build.
    struct FuzzSetupError: Error, CustomStringConvertible {
        var description: String
    }

    /// Removes the SQLite files (at exit).
    func removeFiles() {
        try? FileManager.default.removeItem(at: self.directory)
    }

    /// Runs one input (see the type's description for its format).
    func run(_ input: UnsafeRawBufferPointer) {
        let number = self.inputs.wrappingAdd(1, ordering: .relaxed).newValue
        let readSize = input.first.map { Int($0) } ?? 0
        let stream = Array(input.dropFirst())
        let channel = NIOAsyncTestingChannel(loop: self.loop)
        var serverBytes: [UInt8] = []

        // Connect and log in as a user no earlier input used.
        self.blocking { [connections] in
            try await self.loop.submit { try channel.pipeline.syncOperations.addHandler(connections.makeConnectionHandler()) }.get()
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 40_000)).get()
            let hello = Hello(protocolVersion: 1, features: ["zlib"], userId: "h\(number)", clientName: "sbfuzz")
            var frame = ByteBuffer()
            FrameEncoder().encode(.control(.hello(hello)), into: &frame)
            try await channel.writeInbound(frame)
        }
        self.settle()
        serverBytes += self.written(by: channel)
        let messages = Self.decodeServerStream(serverBytes, input: stream)
        guard case .control(.welcome)? = messages.first else { fatalError("HELLO was not answered with WELCOME: \(messages)") }

        // The input, in reads of the chosen size.
        self.blocking {
            var offset = 0
            while offset < stream.count, channel.isActive {
                let end = readSize == 0 ? stream.count : min(stream.count, offset + readSize)
                _ = try? await channel.writeInbound(ByteBuffer(bytes: stream[offset..<end]))
                offset = end
            }
        }
        self.settle()
        // Timers: heartbeat checks, presence intervals and timeouts, provider timeouts, lock TTLs.
        self.blocking { await self.loop.advanceTime(by: .seconds(2)) }
        self.settle()
        serverBytes += self.written(by: channel)
        self.blocking { try? await channel.close() }
        self.settle()
        serverBytes += self.written(by: channel)
        _ = Self.decodeServerStream(serverBytes, input: stream)
    }

    /// Runs the loop until the stores' writers have answered everything the input started.
    private func settle() {
        for _ in 0..<3 {
            self.blocking { await self.loop.run() }
            self.eventStore.flush()
            self.profileStore.flush()
        }
        self.blocking { await self.loop.run() }
    }

    /// The bytes the gateway wrote and flushed to `channel` so far.
    private func written(by channel: NIOAsyncTestingChannel) -> [UInt8] {
        let box = Mutex<[UInt8]>([])
        self.blocking {
            while let buffer = try? await channel.readOutbound(as: ByteBuffer.self) {
                box.withLock { $0 += buffer.readableBytesView }
            }
        }
        return box.withLock { $0 }
    }

    /// Decodes what the gateway wrote; traps when it is not a sequence of whole, valid server frames.
    @discardableResult
    private static func decodeServerStream(_ bytes: [UInt8], input: [UInt8]) -> [SwitchboardMessage] {
        var buffer = ByteBuffer(bytes: bytes)
        var decoder = FrameDecoder(
            limits: FrameLimits(maxFrameSize: FrameLimits.absoluteMaxFrameSize, maxInflatedSize: 64 << 20, compressionEnabled: true),
            direction: .serverToClient)
        var messages: [SwitchboardMessage] = []
        do {
            while let frame = try decoder.decodeFrame(from: &buffer) {
                messages.append(try SwitchboardMessage.decode(frame))
            }
        } catch {
            fatalError("the gateway wrote an invalid frame (\(error)) after \(messages.count) valid ones")
        }
        return messages
    }

    /// Runs `body` on the concurrency pool and blocks this thread (libFuzzer's, not one of the pool's) until it ends.
    private func blocking(_ body: @escaping @Sendable () async throws -> Void) {
        let done = DispatchSemaphore(value: 0)
        Task {
            do {
                try await body()
            } catch {
                fatalError("the handler target's harness failed: \(error)")
            }
            done.signal()
        }
        done.wait()
    }
}
