import Foundation
import SwitchboardTestSupport
import Synchronization

/// Seconds since a run started, on one monotonic clock shared by every client and fault of the run.
struct RunClock: Sendable {
    let start = ContinuousClock.now

    func now() -> Double { Self.seconds(ContinuousClock.now - self.start) }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

/// `count` real `switchboard --cluster` processes that a test may pause, kill and restart. A node whose process
/// exits is started again, as a new process, `restartDelay` later (as a supervisor such as systemd would); it
/// listens on a port the kernel chooses, so a client asks ``port(_:)`` each time it connects.
final class SupervisedNodes: Sendable {
    private struct Slot {
        var process: SpawnedProcess?
        var port: Int?
        var starts = 0
        var exitedAt: Double?
    }

    private let executable: String
    private let arguments: @Sendable (Int) -> [String]
    private let directory: String
    private let clock: RunClock
    private let restartDelay: Double
    private let slots: Mutex<[Slot]>
    private let journal = Mutex<[String]>([])
    private let supervising = Mutex<Task<Void, Never>?>(nil)

    /// - Parameter arguments: A node's arguments after the executable, by index (its log goes to `directory`).
    init(
        count: Int, executable: String, directory: String, clock: RunClock, restartDelay: Double = 3,
        arguments: @escaping @Sendable (Int) -> [String]
    ) {
        self.executable = executable
        self.arguments = arguments
        self.directory = directory
        self.clock = clock
        self.restartDelay = restartDelay
        self.slots = Mutex(Array(repeating: Slot(), count: count))
    }

    deinit {
        self.supervising.withLock { $0?.cancel() }
    }

    var count: Int { self.slots.withLock { $0.count } }

    /// What happened to the nodes: exits, restarts and signals, with their times.
    var events: [String] { self.journal.withLock { $0 } }

    func note(_ event: String) {
        let line = "\(HistoryChecker.time(self.clock.now())) s: \(event)"
        self.journal.withLock { $0.append(line) }
    }

    /// Starts every node and waits until each listens.
    func startAll() async throws {
        for index in 0..<self.count { try await self.start(index) }
        let task = Task { [weak self] in
            while !Task.isCancelled {
                await self?.superviseOnce()
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
        self.supervising.withLock { $0 = task }
    }

    /// The port node `index` listens on, if it runs and listens.
    func port(_ index: Int) -> Int? {
        self.slots.withLock { slots in slots[index].process?.isRunning == true ? slots[index].port : nil }
    }

    /// How many times node `index` was started.
    func starts(_ index: Int) -> Int { self.slots.withLock { $0[index].starts } }

    /// Sends `signal` to node `index`'s current process.
    func signal(_ index: Int, _ signal: Int32, _ name: String) {
        let process = self.slots.withLock { $0[index].process }
        process?.signal(signal)
        self.note("node \(index) (pid \(process.map { String($0.pid) } ?? "none")) sent \(name)")
    }

    /// Waits until node `index` has been started more than `starts` times and listens, at most `seconds`.
    func waitUntilRestarted(_ index: Int, after starts: Int, seconds: Double = 30) async -> Bool {
        let deadline = self.clock.now() + seconds
        while self.clock.now() < deadline {
            if self.starts(index) > starts, self.port(index) != nil { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// Waits until every node listens, at most `seconds`.
    func waitUntilAllListen(seconds: Double) async -> Bool {
        let deadline = self.clock.now() + seconds
        while self.clock.now() < deadline {
            if (0..<self.count).allSatisfy({ self.port($0) != nil }) { return true }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return false
    }

    /// Stops supervising, then stops every node: SIGCONT (a paused one), SIGTERM, SIGKILL after `seconds`.
    func stopAll(seconds: Double = 10) async {
        let task = self.supervising.withLock { $0.take() }
        task?.cancel()
        await task?.value
        let processes = self.slots.withLock { slots in slots.map(\.process) }
        for (index, process) in processes.enumerated() {
            guard let process, process.isRunning else { continue }
            process.signal(SIGCONT)
            process.signal(SIGTERM)
            let status = await process.waitForExit(seconds: seconds)
            if status == nil {
                process.killAndWait()
                self.note("node \(index) ignored SIGTERM for \(Int(seconds)) s; killed")
            } else {
                self.note("node \(index) stopped with status \(status!)")
            }
        }
    }

    /// The log of node `index`'s latest process.
    func log(_ index: Int) -> String {
        let starts = self.starts(index)
        return (try? String(contentsOfFile: self.logPath(index, starts), encoding: .utf8)) ?? ""
    }

    private func logPath(_ index: Int, _ start: Int) -> String {
        self.directory + "/node\(index)-\(start).log"
    }

    private func start(_ index: Int) async throws {
        let start = self.slots.withLock { slots in
            slots[index].starts += 1
            slots[index].port = nil
            slots[index].exitedAt = nil
            return slots[index].starts
        }
        let logPath = self.logPath(index, start)
        let process = try SpawnedProcess(
            executable: self.executable, arguments: self.arguments(index), stdout: .null, stderr: .file(logPath))
        self.slots.withLock { $0[index].process = process }
        let deadline = self.clock.now() + 60
        while self.clock.now() < deadline, process.isRunning {
            let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            if let port = GatewayProcess.listeningPort(inLog: log) {
                self.slots.withLock { $0[index].port = port }
                self.note("node \(index) started (pid \(process.pid), port \(port))")
                return
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
        let status = process.exitStatusNow()
        self.note("node \(index) did not start (status \(status.map(String.init) ?? "running"))")
        if start == 1 {
            throw StartFailure(description: "node \(index) did not start:\n" + ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""))
        }
    }

    /// Notes each node that exited and starts it again once `restartDelay` has passed.
    private func superviseOnce() async {
        for index in 0..<self.count {
            let (process, exitedAt) = self.slots.withLock { ($0[index].process, $0[index].exitedAt) }
            guard let process else { continue }
            if exitedAt == nil, let status = process.exitStatusNow() {
                self.slots.withLock { $0[index].exitedAt = self.clock.now() }
                self.note("node \(index) (pid \(process.pid)) exited with status \(status)")
            } else if let exitedAt, self.clock.now() >= exitedAt + self.restartDelay {
                try? await self.start(index)
            }
        }
    }

    struct StartFailure: Error, CustomStringConvertible {
        var description: String
    }
}
