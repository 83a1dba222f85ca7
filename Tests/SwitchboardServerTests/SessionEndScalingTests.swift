import Foundation
import NIOCore
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Many sessions of one user ending at once, against the real `switchboard` executable over its Unix socket.
///
/// Each session leaves the registry, the event area's online list, its presence channel and a lock's waiting queue.
/// A linear search per session in any of them makes the ends cost O(n²) on the event loop: 10,000 sessions held
/// every client up for 6.4 s on a release build (far longer on a debug one). With O(1) removals another client's
/// PING is answered within 3 s throughout, on a loaded machine and a debug build.
///
/// `SB_GATEWAY_BINARY` runs another build (a release one, to measure; the test logs the longest PONG wait).
@Suite struct SessionEndScalingTests {
    static let sessions = 10_000

    @Test("10,000 sessions of one user ending together: another client's PING is answered within 3 s throughout")
    func manySessionsOfOneUserEndingTogetherKeepOthersAnswered() async throws {
        let binary = ProcessInfo.processInfo.environment["SB_GATEWAY_BINARY"] ?? ProcessTests.executable.path
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build the switchboard product first")
        // The test and the gateway each hold one descriptor per session.
        let limit = Self.raiseDescriptorLimit()
        try #require(limit >= Self.sessions + 1_000, "RLIMIT_NOFILE is \(limit): too low for \(Self.sessions) sessions")
        let files = ChildGatewayFiles("sbends")
        defer { files.remove() }
        let process = try SpawnedProcess(
            executable: binary,
            arguments: [
                "--tcp", "off", "--unix-socket", files.socket.path, "--database", files.database.path,
                "--log-level", "error",
            ])
        defer { process.killAndWait() }
        try #require(await ProcessTests.waitForFile(files.socket.path), "the gateway did not start")

        // Another user holds the lock every session of the crowd waits for.
        let pinger = try await ProcessTests.connectWhenListening(files.socket.path)
        _ = try await pinger.login("pinger")
        pinger.send(.request(id: 1, .setLock(SetLockRequest(channel: "room", lockName: "L", ttlSeconds: 60))))
        pinger.send(.request(id: 2, .acquireLock(AcquireLockRequest(channel: "room", lockName: "L"))))
        for id: UInt32 in [1, 2] {
            guard case .response(id, _) = try await pinger.nextResponse() else {
                Issue.record("request \(id) of the lock holder was not answered")
                return
            }
        }
        let baselineDescriptors = try #require(Self.openDescriptors(process.pid))

        // The crowd: one user on many connections, each in the channel and waiting for the lock.
        let running = RunningGateway(addresses: .init(unixSocketPath: files.socket.path), gateway: nil)
        var crowd: [RawSocket] = []
        crowd.reserveCapacity(Self.sessions)
        for index in 0..<Self.sessions {
            let socket = try RawSocket(running, .unix)
            var frames = ByteBuffer()
            // The longest heartbeat interval: the crowd sends nothing more, and a slow start must not time it out.
            let hello = Hello(
                protocolVersion: 1, userId: "crowd", clientType: index % 2 == 0 ? .ios : .web, deviceId: "d\(index)",
                heartbeatMs: 300_000)
            FrameEncoder().encode(.control(.hello(hello)), into: &frames)
            FrameEncoder().encode(.request(id: 1, .subscribeChannel(SubscribeChannelRequest(channel: "room"))), into: &frames)
            FrameEncoder().encode(
                .request(id: 2, .acquireLock(AcquireLockRequest(channel: "room", lockName: "L", retry: true))), into: &frames)
            socket.send(frames)
            crowd.append(socket)
        }
        for socket in crowd {
            // Without O(1) joins and leaves the crowd's own logins slow down too: waited for, up to minutes.
            guard case .response(1, .subscribeChannel) = try await socket.nextResponse(seconds: 600) else {
                Issue.record("a session of the crowd was not admitted to the channel")
                return
            }
        }

        // PINGs from another client, one after the other, from before the crowd leaves until it is gone.
        let stop = StopFlag()
        let pings = Task { () -> (longest: Double, answered: Int, missing: Bool) in
            var longest = 0.0
            var answered = 0
            var nonce: UInt64 = 0
            while !stop.isSet {
                nonce += 1
                let started = ContinuousClock.now
                pinger.send(.control(.ping(Ping(nonce: nonce))))
                guard case .control(.pong(let pong)) = try await pinger.next(), pong.nonce == nonce else {
                    return (longest, answered, true)  // none within the socket's 5 s receive timeout
                }
                let waited = ContinuousClock.now - started
                longest = max(longest, Double(waited.components.seconds) + Double(waited.components.attoseconds) / 1e18)
                answered += 1
                try await Task.sleep(for: .milliseconds(5))
            }
            return (longest, answered, false)
        }
        try await Task.sleep(for: .milliseconds(200))
        let leaving = ContinuousClock.now
        crowd.removeAll()  // closes every socket of the crowd at once
        let deadline = leaving + .seconds(300)
        while (Self.openDescriptors(process.pid) ?? 0) > baselineDescriptors, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let gone = ContinuousClock.now - leaving
        try await Task.sleep(for: .milliseconds(300))
        stop.set()
        let (longest, answered, missing) = try await pings.value
        print("\(Self.sessions) sessions of one user ended in \(gone); the longest PONG wait was \(Int(longest * 1000)) ms")
        #expect(!missing, "a PONG did not come back within 5 s while the sessions ended")
        #expect(answered > 10)
        // Linear end: well under a second in release, under 2 s in this debug build on a quiet machine; 3 s leaves room
        // for a loaded one. The quadratic end this guards against held the loop 6.4 s in release, far longer in debug.
        #expect(longest < 3.0, "the longest PONG wait was \(Int(longest * 1000)) ms")

        // Every wait ended with its session: released, the lock is free for a third user (not handed to the crowd).
        pinger.send(.request(id: 3, .releaseLock(ReleaseLockRequest(channel: "room", lockName: "L"))))
        guard case .response(3, .releaseLock) = try await pinger.nextResponse() else {
            Issue.record("the release was not answered")
            return
        }
        let checker = try await ProcessTests.connectWhenListening(files.socket.path)
        _ = try await checker.login("checker")
        checker.send(.request(id: 1, .acquireLock(AcquireLockRequest(channel: "room", lockName: "L"))))
        guard case .response(1, .acquireLock) = try await checker.nextResponse() else {
            Issue.record("the lock was not free after the crowd left")
            return
        }
    }

    /// Raises the soft limit of open descriptors to the hard one (the gateway inherits it); returns the limit.
    static func raiseDescriptorLimit() -> Int {
        var limits = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits) == 0 else { return 0 }
        if limits.rlim_cur < limits.rlim_max {
            limits.rlim_cur = min(limits.rlim_max, 1 << 20)
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits)
            _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits)
        }
        return Int(clamping: limits.rlim_cur)
    }

    /// The number of descriptors `pid` has open.
    static func openDescriptors(_ pid: pid_t) -> Int? {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count
    }
}

/// A flag one task sets and another reads.
private final class StopFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false

    var isSet: Bool { self.lock.withLock { self.value } }

    func set() { self.lock.withLock { self.value = true } }
}

extension RawSocket {
    /// The next response, skipping pushes and control frames; nil when none came within `seconds` (the socket's
    /// reads time out after 5 s: a slow gateway is waited for again) or at once when the connection closed.
    func nextResponse(seconds: Double = 5) async throws -> SwitchboardMessage? {
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        repeat {
            while let message = try await self.next() {
                if case .response = message { return message }
            }
            if self.closedByServer { return nil }
            try await Task.sleep(for: .milliseconds(10))
        } while ContinuousClock.now < deadline
        return nil
    }
}
