import NIOCore
import SwitchboardWire

/// What one run of the remote fuzzer does.
package struct RemoteFuzzConfiguration: Sendable {
    /// The gateway under test (open development mode: HELLO with a user id and no token).
    package var endpoint: GatewayEndpoint
    /// How long to send frames.
    package var seconds: Double
    /// Connections the frames are spread over (each one reopened whenever the gateway closes it).
    package var connections: Int
    /// The seed every frame follows from.
    package var seed: UInt64
    /// After this many frames, a fresh connection logs in and must get a PONG to a PING (the liveness probe).
    package var probeEveryFrames: Int
    /// How long the gateway may take to answer a probe's HELLO or PING, or to take a write's bytes.
    package var answerTimeoutSeconds: Double
    /// The most recent frames kept to print when the run fails.
    package var recentFramesKept: Int

    /// Creates a configuration.
    package init(
        endpoint: GatewayEndpoint, seconds: Double, connections: Int = 8, seed: UInt64,
        probeEveryFrames: Int = 2_000, answerTimeoutSeconds: Double = 5, recentFramesKept: Int = 12
    ) {
        self.endpoint = endpoint
        self.seconds = seconds
        self.connections = max(1, connections)
        self.seed = seed
        self.probeEveryFrames = max(1, probeEveryFrames)
        self.answerTimeoutSeconds = answerTimeoutSeconds
        self.recentFramesKept = recentFramesKept
    }
}

/// What a remote fuzz run sent and received, and whether the gateway stayed alive.
package struct RemoteFuzzReport: Sendable, CustomStringConvertible {
    /// The seed of the run.
    package var seed: UInt64
    /// Frames sent (pieces of frames cut off by a dropped connection count).
    package var framesSent = 0
    /// Bytes written.
    package var bytesSent = 0
    /// Writes (a write holds one frame, or many pipelined).
    package var writes = 0
    /// Frames sent, by how they were made.
    package var framesByKind: [FuzzFrame.Kind: Int] = [:]
    /// Frames sent that were built from a request of each op.
    package var framesByOp: [Opcode: Int] = [:]
    /// Connections opened for fuzzing (probes not counted).
    package var connectionsOpened = 0
    /// Connections the gateway closed (after a GOAWAY, a reset or at the end of the stream).
    package var closedByGateway = 0
    /// Connections this side dropped in the middle of a frame.
    package var droppedMidFrame = 0
    /// WELCOMEs received.
    package var welcomes = 0
    /// Successful responses received.
    package var responses = 0
    /// Error responses received, by code.
    package var errorAnswers: [UInt64: Int] = [:]
    /// GOAWAYs received, by code.
    package var goAways: [UInt64: Int] = [:]
    /// Pushes received.
    package var pushes = 0
    /// PONGs received (fuzzed PINGs and probes).
    package var pongs = 0
    /// Liveness probes that passed.
    package var probesPassed = 0
    /// Seconds the run took.
    package var elapsedSeconds = 0.0
    /// Why the run failed: the gateway died, stopped answering or wrote something that is not a frame.
    package var failure: String?
    /// The last frames sent before the end of the run (or the failure), oldest first, as `kind op hex`.
    package var recentFrames: [String] = []

    /// Whether the gateway stayed alive and well-formed throughout.
    package var passed: Bool { self.failure == nil }

    package var description: String {
        func list<Key>(_ counts: [Key: Int], _ name: (Key) -> String) -> String {
            counts.sorted { $0.value > $1.value }.map { "\(name($0.key))=\($0.value)" }.joined(separator: " ")
        }
        var lines = [
            "seed \(self.seed): \(self.framesSent) frames (\(self.bytesSent) bytes, \(self.writes) writes) in "
                + "\(Int(self.elapsedSeconds)).\(Int(self.elapsedSeconds * 10) % 10) s over "
                + "\(self.connectionsOpened) connections",
            "  kinds: " + list(self.framesByKind) { $0.rawValue },
            "  ops: \(self.framesByOp.count) of \(Opcode.allCases.count) (" + list(self.framesByOp) { $0.name } + ")",
            "  received: \(self.welcomes) welcomes, \(self.responses) responses, "
                + "\(self.errorAnswers.values.reduce(0, +)) error answers, \(self.goAways.values.reduce(0, +)) GOAWAYs, "
                + "\(self.pushes) pushes, \(self.pongs) pongs",
            "  error answers by code: " + list(self.errorAnswers) { String($0) },
            "  GOAWAY by code: " + list(self.goAways) { String($0) },
            "  closed by the gateway: \(self.closedByGateway), dropped mid-frame: \(self.droppedMidFrame), "
                + "liveness probes passed: \(self.probesPassed)",
        ]
        if let failure = self.failure {
            lines.append("FAILED: \(failure)")
            lines.append("  replay: sbfuzz remote ... --seed \(self.seed)   last frames sent, oldest first:")
            lines += self.recentFrames.map { "    " + $0 }
        }
        return lines.joined(separator: "\n")
    }
}

/// Fuzzes a running gateway from outside the process: many connections, each logged in (open development mode),
/// get valid requests of every op and the same requests damaged (``FuzzFrameFactory``), one at a time or pipelined
/// in one write, and now and then a connection is dropped in the middle of a frame. A connection the gateway
/// closes is reopened: closing is how the gateway rejects garbage.
///
/// Every ``RemoteFuzzConfiguration/probeEveryFrames`` frames, and at the end, a fresh connection logs in and must
/// get a PONG for its PING within ``RemoteFuzzConfiguration/answerTimeoutSeconds``; a run fails when a probe does
/// not, when the gateway refuses connections, or when it writes bytes that are not valid frames. The frames follow
/// from the seed alone (which connection carries them depends on when the gateway closes connections).
package final class RemoteFuzzer {
    private struct Connection {
        let socket: GatewaySocket
        var decoder = FrameDecoder(limits: RemoteFuzzer.serverFrameLimits, direction: .serverToClient)
        var received: [UInt8] = []
    }

    /// Limits for what the gateway writes: anything a frame may be (the fuzzer asks for zlib).
    private static let serverFrameLimits = FrameLimits(
        maxFrameSize: FrameLimits.absoluteMaxFrameSize, maxInflatedSize: 64 << 20, compressionEnabled: true)

    private let configuration: RemoteFuzzConfiguration
    private let log: (String) -> Void
    private var factory: FuzzFrameFactory
    private var connections: [Connection?]
    private var report: RemoteFuzzReport
    private var recent: [String] = []
    private var probeNumber: UInt64 = 0

    /// Creates a fuzzer; `log` gets progress lines (probes, failures).
    package init(_ configuration: RemoteFuzzConfiguration, log: @escaping (String) -> Void = { print($0) }) {
        self.configuration = configuration
        self.log = log
        let users = (0..<configuration.connections).map { Self.user($0) }
        self.factory = FuzzFrameFactory(seed: configuration.seed, names: users + ["lobby", "room-1", "k", "key-2", "lock-a", "group-1", ""])
        self.connections = Array(repeating: nil, count: configuration.connections)
        self.report = RemoteFuzzReport(seed: configuration.seed)
    }

    private static func user(_ slot: Int) -> String { "fuzz-\(slot)" }

    /// Runs for the configured time (or until the gateway fails) and returns what happened.
    package func run() -> RemoteFuzzReport {
        let start = monotonicSeconds()
        let end = start + self.configuration.seconds
        var nextProbe = self.configuration.probeEveryFrames
        if self.probeFails() { return self.finish(start) }
        while self.report.failure == nil, monotonicSeconds() < end {
            let slot = self.factory.generator.index(below: self.configuration.connections)
            let pipelined = self.factory.generator.index(below: 100) < 15
            let count = pipelined ? 2 + self.factory.generator.index(below: 63) : 1
            let frames = (0..<count).map { _ in self.factory.next() }
            let dropMidFrame = self.factory.generator.index(below: 60) == 0
            let cut = self.factory.generator.index(below: max(1, frames[count - 1].bytes.count))
            let resetOnDrop = self.factory.generator.bool()
            self.send(frames, on: slot, cutLastAt: dropMidFrame ? cut : nil, reset: resetOnDrop)
            self.drainAll()
            if self.report.failure == nil, self.report.framesSent >= nextProbe {
                nextProbe = self.report.framesSent + self.configuration.probeEveryFrames
                _ = self.probeFails()
            }
        }
        for slot in self.connections.indices {
            self.connections[slot]?.socket.close()
            self.connections[slot] = nil
        }
        if self.report.failure == nil { _ = self.probeFails() }
        return self.finish(start)
    }

    private func finish(_ start: Double) -> RemoteFuzzReport {
        self.report.elapsedSeconds = monotonicSeconds() - start
        self.report.recentFrames = self.recent
        return self.report
    }

    // MARK: - Fuzz connections

    private func send(_ frames: [FuzzFrame], on slot: Int, cutLastAt cut: Int?, reset: Bool) {
        var bytes: [UInt8] = []
        for (index, frame) in frames.enumerated() {
            let isCut = cut != nil && index == frames.count - 1
            let piece = isCut ? Array(frame.bytes.prefix(cut!)) : frame.bytes
            bytes += piece
            self.report.framesByKind[frame.kind, default: 0] += 1
            if let op = frame.op { self.report.framesByOp[op, default: 0] += 1 }
            self.remember(frame, bytes: piece, note: isCut ? "(cut, then the connection dropped)" : "")
        }
        self.report.framesSent += frames.count
        guard var connection = self.connection(slot) else { return }
        self.report.writes += 1
        let outcome = connection.socket.write(
            bytes, received: &connection.received, deadline: monotonicSeconds() + self.configuration.answerTimeoutSeconds)
        self.report.bytesSent += bytes.count
        self.connections[slot] = connection
        self.consume(slot)
        switch outcome {
        case .open:
            if cut != nil {
                self.report.droppedMidFrame += 1
                self.connections[slot]?.socket.close(reset: reset)
                self.connections[slot] = nil
            }
        case .closed:
            self.closedByGateway(slot)
        case .timedOut:
            // The gateway stopped taking bytes from this connection: fine if it still answers others.
            self.log("a write to connection \(slot) made no progress for \(self.configuration.answerTimeoutSeconds) s; probing")
            self.connections[slot]?.socket.close(reset: true)
            self.connections[slot] = nil
            _ = self.probeFails()
        }
    }

    /// The open connection of `slot`, opened and logged in when needed; nil when the gateway refused the login
    /// (or a probe found it dead, which fails the run).
    private func connection(_ slot: Int) -> Connection? {
        if let connection = self.connections[slot] { return connection }
        let socket: GatewaySocket
        do {
            socket = try GatewaySocket(self.configuration.endpoint, timeoutSeconds: self.configuration.answerTimeoutSeconds)
        } catch {
            self.log("connecting for connection \(slot) failed (\(error)); probing")
            _ = self.probeFails()
            return nil
        }
        self.report.connectionsOpened += 1
        var connection = Connection(socket: socket)
        let hello = Hello(protocolVersion: 1, features: ["zlib"], userId: Self.user(slot), clientName: "sbfuzz")
        let welcomed = self.exchange(.control(.hello(hello)), on: &connection) {
            if case .control(.welcome) = $0 { return true }
            return false
        }
        guard welcomed else {
            socket.close()
            if self.report.failure == nil {
                self.log("connection \(slot) got no WELCOME; probing")
                _ = self.probeFails()
            }
            return nil
        }
        self.report.welcomes += 1
        self.connections[slot] = connection
        return connection
    }

    private func closedByGateway(_ slot: Int) {
        self.report.closedByGateway += 1
        self.connections[slot]?.socket.close()
        self.connections[slot] = nil
    }

    /// Reads whatever the open connections have received.
    private func drainAll() {
        for slot in self.connections.indices where self.connections[slot] != nil {
            let outcome = self.connections[slot]!.socket.read(into: &self.connections[slot]!.received)
            self.consume(slot)
            if outcome == .closed, self.connections[slot] != nil { self.closedByGateway(slot) }
        }
    }

    /// Decodes and counts the complete frames `slot` received.
    private func consume(_ slot: Int) {
        guard var connection = self.connections[slot], !connection.received.isEmpty else { return }
        let messages = self.decode(&connection)
        self.connections[slot] = connection
        for message in messages { self.count(message) }
    }

    private func decode(_ connection: inout Connection) -> [SwitchboardMessage] {
        var buffer = ByteBuffer(bytes: connection.received)
        var messages: [SwitchboardMessage] = []
        do {
            while let frame = try connection.decoder.decodeFrame(from: &buffer) {
                messages.append(try SwitchboardMessage.decode(frame))
            }
        } catch {
            self.fail("the gateway wrote bytes that are not a valid frame: \(error)")
            buffer.moveReaderIndex(to: buffer.writerIndex)
        }
        connection.received = Array(buffer.readableBytesView)
        return messages
    }

    private func count(_ message: SwitchboardMessage) {
        switch message {
        case .response: self.report.responses += 1
        case .error(_, _, let body): self.report.errorAnswers[body.code, default: 0] += 1
        case .control(.goAway(let goAway)): self.report.goAways[goAway.code, default: 0] += 1
        case .control(.pong): self.report.pongs += 1
        case .control: break
        case .push, .unknownPush: self.report.pushes += 1
        case .request: self.fail("the gateway sent a request frame")
        }
    }

    // MARK: - Liveness

    /// Sends `message` on `connection` and reads until a message `isAnswer` accepts arrives (true), the gateway closes
    /// the connection or the answer timeout passes (false). Everything read is counted.
    private func exchange(
        _ message: SwitchboardMessage, on connection: inout Connection, isAnswer: (SwitchboardMessage) -> Bool
    ) -> Bool {
        var bytes = ByteBuffer()
        FrameEncoder().encode(message, into: &bytes)
        let deadline = monotonicSeconds() + self.configuration.answerTimeoutSeconds
        guard connection.socket.write(Array(bytes.readableBytesView), received: &connection.received, deadline: deadline) == .open
        else { return false }
        while true {
            for received in self.decode(&connection) {
                self.count(received)
                if isAnswer(received) { return true }
            }
            if self.report.failure != nil { return false }
            guard connection.socket.waitReadable(deadline: deadline) else { return false }
            if connection.socket.read(into: &connection.received) == .closed {
                for received in self.decode(&connection) {
                    self.count(received)
                    if isAnswer(received) { return true }
                }
                return false
            }
        }
    }

    /// Opens a fresh connection, logs in and expects a PONG to a PING; records a failure (and returns true) when the
    /// gateway refuses the connection or does not answer in time.
    private func probeFails() -> Bool {
        self.probeNumber += 1
        let number = self.probeNumber
        let socket: GatewaySocket
        do {
            socket = try GatewaySocket(self.configuration.endpoint, timeoutSeconds: self.configuration.answerTimeoutSeconds)
        } catch {
            self.fail("liveness probe \(number): the gateway does not accept connections (\(error))")
            return true
        }
        defer { socket.close() }
        var connection = Connection(socket: socket)
        let hello = Hello(protocolVersion: 1, features: ["zlib"], userId: "probe-\(number)", clientName: "sbfuzz-probe")
        let welcomed = self.exchange(.control(.hello(hello)), on: &connection) {
            if case .control(.welcome) = $0 { return true }
            return false
        }
        guard welcomed else {
            self.fail("liveness probe \(number): no WELCOME within \(self.configuration.answerTimeoutSeconds) s")
            return true
        }
        let nonce = 0x5B0F_0000 &+ number
        let ponged = self.exchange(.control(.ping(Ping(nonce: nonce))), on: &connection) {
            if case .control(.pong(let pong)) = $0 { return pong.nonce == nonce }
            return false
        }
        guard ponged else {
            self.fail("liveness probe \(number): no PONG within \(self.configuration.answerTimeoutSeconds) s")
            return true
        }
        self.report.probesPassed += 1
        return false
    }

    private func fail(_ reason: String) {
        guard self.report.failure == nil else { return }
        self.report.failure = reason
        self.log("FAILED after \(self.report.framesSent) frames: \(reason)")
    }

    private func remember(_ frame: FuzzFrame, bytes: [UInt8], note: String) {
        let hex = bytes.prefix(256).map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }
            .joined()
        let more = bytes.count > 256 ? "… (\(bytes.count) bytes)" : ""
        self.recent.append("\(frame.kind.rawValue) \(frame.op?.name ?? "-") \(hex)\(more) \(note)")
        if self.recent.count > self.configuration.recentFramesKept { self.recent.removeFirst() }
    }
}
