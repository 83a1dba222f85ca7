import SwitchboardClient
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization

/// Clients that read, write and compare-and-set a few channel metadata sets through the nodes of a cluster, each
/// recording every operation it makes (``HistoryOperation``) for ``HistoryChecker``.
///
/// Each client runs one operation at a time, in a loop bounded in count and time. Client `i` prefers node
/// `i % nodes`: it connects there first, fails over to the next node that answers when a request times out or its
/// connection is lost, and goes back to its own node `returnHomeAfter` seconds after a fail-over (as a load
/// balancer would). After connecting it reads each set until the node shows what the client saw before (at most
/// `catchUpLimit` seconds), since another node applies the writes of the one it left a few milliseconds later.
struct HistoryWorkload: Sendable {
    var clients = 9
    var channels = ["hist0", "hist1", "hist2"]
    var keys = ["a", "b"]
    var maxOperationsPerClient = 4_000
    var thinkTime: Duration = .milliseconds(8)
    var requestTimeout: Duration = .seconds(4)
    var connectTimeout: Duration = .seconds(2)
    var returnHomeAfter = 2.0
    var catchUpLimit = 5.0
    var seed: UInt64 = UInt64.random(in: 1...UInt64.max)

    /// Runs every client until `end()` (seconds on `clock`, asked before each operation) and returns what they
    /// recorded.
    func run(nodes: SupervisedNodes, clock: RunClock, until end: @escaping @Sendable () -> Double) async -> [HistoryOperation] {
        let recorder = Recorder()
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<self.clients {
                group.addTask {
                    var client = Client(index: index, workload: self, nodes: nodes, clock: clock, recorder: recorder)
                    await client.run(until: end)
                }
            }
        }
        return recorder.operations
    }

    private final class Recorder: Sendable {
        private let storage = Mutex<[HistoryOperation]>([])

        func record(_ operation: HistoryOperation) { self.storage.withLock { $0.append(operation) } }

        var operations: [HistoryOperation] { self.storage.withLock { $0 } }
    }

    /// One client's loop and what it knows: the sets as it last saw them (for its compare-and-set writes) and the
    /// revision below which it must not read each set.
    private struct Client {
        let index: Int
        let workload: HistoryWorkload
        let nodes: SupervisedNodes
        let clock: RunClock
        let recorder: Recorder
        var random: SplitMix64
        var connection: SwitchboardClient?
        var node: Int
        var connectedAt = 0.0
        var seen: [String: MetadataState] = [:]
        var floors: [String: UInt64] = [:]
        var sequence = 0

        init(index: Int, workload: HistoryWorkload, nodes: SupervisedNodes, clock: RunClock, recorder: Recorder) {
            self.index = index
            self.workload = workload
            self.nodes = nodes
            self.clock = clock
            self.recorder = recorder
            self.random = SplitMix64(seed: workload.seed &+ UInt64(index) &* 0x9E37_79B9_7F4A_7C15)
            self.node = index % nodes.count
        }

        var home: Int { self.index % self.nodes.count }

        mutating func run(until end: @Sendable () -> Double) async {
            var count = 0
            while self.clock.now() < end(), count < self.workload.maxOperationsPerClient {
                if let connection, self.node != self.home, self.clock.now() - self.connectedAt > self.workload.returnHomeAfter {
                    await connection.close()
                    self.connection = nil
                }
                if self.connection == nil {
                    guard await self.connect() else { continue }
                    await self.catchUp()
                    continue
                }
                count += 1
                await self.step()
                try? await Task.sleep(for: self.workload.thinkTime)
            }
            await self.connection?.close()
        }

        /// Connects to the first node that answers, this client's own first.
        private mutating func connect() async -> Bool {
            for offset in 0..<self.nodes.count {
                let candidate = (self.home + offset) % self.nodes.count
                guard let port = self.nodes.port(candidate) else { continue }
                var configuration = ClientConfiguration(
                    endpoint: .tcp(host: "127.0.0.1", port: port), userID: "history\(self.index)")
                configuration.requestTimeout = self.workload.requestTimeout
                configuration.connectTimeout = self.workload.connectTimeout
                configuration.whileDisconnected = .failFast
                let client = SwitchboardClient(configuration: configuration, reconnectPolicy: .never)
                do {
                    _ = try await client.connect()
                    self.connection = client
                    self.node = candidate
                    self.connectedAt = self.clock.now()
                    return true
                } catch {
                    await client.close()
                }
            }
            try? await Task.sleep(for: .milliseconds(200))
            return false
        }

        /// Reads each set the client has seen until the node shows at least what the client saw.
        private mutating func catchUp() async {
            for channel in self.workload.channels {
                let limit = self.clock.now() + self.workload.catchUpLimit
                while let floor = self.floors[channel], self.connection != nil, self.clock.now() < limit {
                    if case .read(let state) = await self.perform(.read, on: channel, catchUp: true),
                        state.majorRevision >= floor
                    {
                        break
                    }
                    try? await Task.sleep(for: .milliseconds(50))
                }
            }
        }

        /// One operation chosen at random: 40 % reads, 25 % plain writes, 20 % compare-and-set on the set's
        /// revision, 15 % on an item's revision.
        private mutating func step() async {
            let channel = self.workload.channels[Int(self.random.next() % UInt64(self.workload.channels.count))]
            let key = self.workload.keys[Int(self.random.next() % UInt64(self.workload.keys.count))]
            self.sequence += 1
            let value = "c\(self.index).\(self.sequence)"
            let roll = self.random.next() % 100
            let action: HistoryOperation.Action
            if roll < 40 {
                action = .read
            } else if roll < 65 {
                action = .set(key: key, value: value)
            } else if roll < 85 {
                action = .compareMajor(expected: self.seen[channel]?.majorRevision ?? 0, key: key, value: value)
            } else if let item = self.seen[channel]?.items[key] {
                action = .compareItem(key: key, expected: item.revision, value: value)
            } else {
                action = .read
            }
            _ = await self.perform(action, on: channel)
        }

        /// Sends `action`, records it and learns from the answer; drops the connection when the answer says it
        /// is unusable.
        private mutating func perform(
            _ action: HistoryOperation.Action, on channel: String, catchUp: Bool = false
        ) async -> HistoryOperation.Outcome {
            guard let connection = self.connection else { return .unknown(code: ErrorCode.unavailable.rawValue) }
            let invokedAt = self.clock.now()
            var outcome: HistoryOperation.Outcome
            var reconnect = false
            do throws(SwitchboardClientError) {
                switch action {
                case .read:
                    let response = try await connection.getChannelMetadata(channel: channel)
                    var items: [String: MetadataState.Item] = [:]
                    for item in response.items { items[item.key] = .init(value: item.value, revision: item.revision) }
                    outcome = .read(MetadataState(majorRevision: response.majorRevision, items: items))
                case .set(let key, let value):
                    let response = try await connection.setChannelMetadata(
                        channel: channel, items: [MetadataItem(key: key, value: value)])
                    outcome = .written(revision: response.majorRevision)
                case .compareMajor(let expected, let key, let value):
                    let response = try await connection.setChannelMetadata(
                        channel: channel, items: [MetadataItem(key: key, value: value)],
                        options: MetadataWriteOptions(majorRevision: Int64(expected)))
                    outcome = .written(revision: response.majorRevision)
                case .compareItem(let key, let expected, let value):
                    let response = try await connection.updateChannelMetadata(
                        channel: channel, items: [MetadataItem(key: key, value: value, revision: expected)])
                    outcome = .written(revision: response.majorRevision)
                }
            } catch {
                switch error.kind {
                case .server:
                    outcome = .refused(code: error.code.rawValue, currentRevision: error.body?.currentRevision ?? -1)
                    reconnect = error.code == .shuttingDown || error.code == .unavailable
                case .notConnected, .connectFailed:
                    outcome = .refused(code: error.code.rawValue, currentRevision: -1)
                    reconnect = true
                default:
                    outcome = .unknown(code: error.code.rawValue)
                    reconnect = true
                }
            }
            self.recorder.record(
                HistoryOperation(
                    client: self.index, node: self.node, channel: channel, action: action, invokedAt: invokedAt,
                    respondedAt: self.clock.now(), outcome: outcome, catchUp: catchUp))
            self.learn(action, outcome, on: channel)
            if reconnect {
                await connection.close()
                self.connection = nil
            }
            return outcome
        }

        private mutating func learn(_ action: HistoryOperation.Action, _ outcome: HistoryOperation.Outcome, on channel: String) {
            var state = self.seen[channel] ?? MetadataState()
            switch (action, outcome) {
            case (_, .read(let read)):
                state = read
            case (_, .written(let revision)):
                state.majorRevision = revision
                if let key = action.key, let value = action.value { state.items[key] = .init(value: value, revision: Int64(revision)) }
            case (.compareMajor, .refused(5000, let current)) where current >= 0:
                state.majorRevision = UInt64(current)
            case (.compareItem(let key, _, _), .refused(5001, let current)) where current > 0:
                state.items[key]?.revision = current
            default:
                return
            }
            self.seen[channel] = state
            switch outcome {
            case .read(let read): self.floors[channel] = max(self.floors[channel] ?? 0, read.majorRevision)
            case .written(let revision): self.floors[channel] = max(self.floors[channel] ?? 0, revision)
            case .refused, .unknown: break
            }
        }
    }
}

