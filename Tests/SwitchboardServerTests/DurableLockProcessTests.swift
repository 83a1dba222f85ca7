import Foundation
import NIOCore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// A single gateway's channel locks survive a restart of the real `switchboard` executable, kill -9 included.
@Suite struct DurableLockProcessTests {
    /// Sends `request` as `id` and returns the next message (the answer: nothing else is pending on the socket).
    static func ask(_ socket: RawSocket, _ id: UInt32, _ request: Request) async throws -> SwitchboardMessage? {
        socket.send(.request(id: id, request))
        return try await socket.next()
    }

    @Test func anAcknowledgedLockAndItsHolderSurviveKillDashNine() async throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: ProcessTests.executable.path), "build the switchboard product first")
        let files = ChildGatewayFiles("sb-locks")
        defer { files.remove() }  // after both gateways were killed or stopped
        let first = try ProcessTests.startGateway(socketPath: files.socket.path, database: files.database.path)
        defer { first.killAndWait() }
        try #require(await ProcessTests.waitForFile(files.socket.path))
        let tony = try await ProcessTests.connectWhenListening(files.socket.path)
        _ = try await tony.login("Tony")
        let set = try await Self.ask(tony, 1, .setLock(SetLockRequest(channel: "room", lockName: "mic", ttlSeconds: 60)))
        guard case .response(1, .setLock) = set else {
            Issue.record("setLock answered \(String(describing: set))")
            return
        }
        let acquired = try await Self.ask(tony, 2, .acquireLock(AcquireLockRequest(channel: "room", lockName: "mic")))
        guard case .response(2, .acquireLock) = acquired else {
            Issue.record("acquireLock answered \(String(describing: acquired))")
            return
        }
        let spare = try await Self.ask(tony, 3, .setLock(SetLockRequest(channel: "room", lockName: "spare", ttlSeconds: 10)))
        guard case .response(3, .setLock) = spare else {
            Issue.record("the second setLock answered \(String(describing: spare))")
            return
        }
        // Acknowledged: now the process dies without a chance to write anything more.
        first.signal(SIGKILL)
        _ = await first.waitForExit()

        unlink(files.socket.path)
        let second = try ProcessTests.startGateway(socketPath: files.socket.path, database: files.database.path)
        defer { second.killAndWait() }
        let ann = try await ProcessTests.connectWhenListening(files.socket.path)
        _ = try await ann.login("Ann")
        guard case .response(1, .getLocks(let after)) = try await Self.ask(ann, 1, .getLocks(GetLocksRequest(channel: "room")))
        else {
            Issue.record("no locks after the restart")
            return
        }
        #expect(after.locks.map(\.lockName) == ["mic", "spare"])
        #expect(after.locks.first?.owner == "Tony")
        #expect(after.locks.first?.ttlSeconds == 60)
        #expect(after.locks.last?.owner == "")
        // The holder's lease runs from the restart (60 s): another user still finds the lock held.
        guard case .error(2, _, let refusal) = try await Self.ask(
            ann, 2, .acquireLock(AcquireLockRequest(channel: "room", lockName: "mic")))
        else {
            Issue.record("Ann took a lock Tony held before the restart")
            return
        }
        #expect(refusal.code == UInt64(ErrorCode.lockHeld.rawValue))
        // Tony comes back within the TTL and still holds it: releasing it succeeds and Ann can take it.
        let back = try await ProcessTests.connectWhenListening(files.socket.path)
        _ = try await back.login("Tony")
        let released = try await Self.ask(back, 1, .releaseLock(ReleaseLockRequest(channel: "room", lockName: "mic")))
        guard case .response(1, .releaseLock) = released else {
            Issue.record("Tony could not release his lock after the restart: \(String(describing: released))")
            return
        }
        guard case .response(3, .acquireLock) = try await Self.ask(
            ann, 3, .acquireLock(AcquireLockRequest(channel: "room", lockName: "mic")))
        else {
            Issue.record("Ann could not take the released lock")
            return
        }
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0)
    }
}
