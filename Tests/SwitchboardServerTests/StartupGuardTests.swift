import Foundation
import NIOCore
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// What the `switchboard` executable guards at start: one gateway per database, and a Unix socket only its owner
/// can reach unless told otherwise.
@Suite struct StartupGuardTests {
    /// A second gateway on a database another gateway serves refuses to start, says why, exits 3 and binds
    /// nothing; the first one keeps serving, and once it stopped the database can be opened again.
    @Test func aSecondGatewayOnTheSameDatabaseRefusesToStart() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ProcessTests.executable.path), "build the switchboard product first")
        let first = ChildGatewayFiles("sb-lock")
        let secondSocket = TemporaryPath.socket("sb-lock2")
        let secondLog = TemporaryPath("sb-lock2", suffix: ".log")
        defer {
            first.remove()
            secondSocket.remove()
            secondLog.remove()
        }
        let running = try ProcessTests.startGateway(socketPath: first.socket.path, database: first.database.path)
        defer { running.killAndWait() }
        let socket = try await ProcessTests.connectWhenListening(first.socket.path)
        _ = try await socket.login("first")

        let second = try SpawnedProcess(
            executable: ProcessTests.executable.path,
            arguments: ["--tcp", "off", "--unix-socket", secondSocket.path, "--database", first.database.path],
            stderr: .file(secondLog.path))
        defer { second.killAndWait() }
        let status = await second.waitForExit(seconds: 30)
        #expect(status == 3, "exit status \(status.map(String.init) ?? "none: it is still running")")
        #expect(access(secondSocket.path, F_OK) != 0, "the refused gateway created its socket")
        let log = (try? String(contentsOfFile: secondLog.path, encoding: .utf8)) ?? ""
        #expect(log.contains("another gateway is using it"), "log: \(log)")

        // The first gateway still serves.
        socket.send(.control(.ping(Ping(nonce: 42))))
        guard case .control(.pong(let pong)) = try await socket.next() else {
            Issue.record("the first gateway stopped answering")
            return
        }
        #expect(pong.nonce == 42)

        // Stopped, it releases the database: a new gateway starts on it.
        running.signal(SIGTERM)
        #expect(await running.waitForExit() == 0)
        let next = try ProcessTests.startGateway(socketPath: secondSocket.path, database: first.database.path)
        defer { next.killAndWait() }
        let again = try await ProcessTests.connectWhenListening(secondSocket.path)
        #expect(try await again.login("second").userId == "second")
    }

    /// Whatever the umask, the socket file is its owner's only (0600) by default, and what
    /// `--unix-socket-mode` says otherwise.
    @Test(arguments: [(nil, 0o600), ("0660", 0o660), ("0666", 0o666)] as [(String?, Int)])
    func theUnixSocketHasTheConfiguredModeWhateverTheUmask(option: String?, expected: Int) async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ProcessTests.executable.path), "build the switchboard product first")
        let files = ChildGatewayFiles("sb-mode")
        defer { files.remove() }
        var command = "umask 000; exec '\(ProcessTests.executable.path)' --tcp off --unix-socket '\(files.socket.path)'"
        command += " --database '\(files.database.path)' --log-level error"
        if let option { command += " --unix-socket-mode \(option)" }
        let gateway = try SpawnedProcess(executable: "/bin/sh", arguments: ["-c", command])
        defer { gateway.killAndWait() }
        let socket = try await ProcessTests.connectWhenListening(files.socket.path)
        _ = try await socket.login("owner")
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: files.socket.path)[.posixPermissions] as? Int)
        #expect(mode & 0o777 == expected, "mode \(String(mode & 0o777, radix: 8))")
    }

    /// A mode that is not octal, or outside 0000-0777, is refused before anything is created.
    @Test(arguments: ["0999", "1777", "rw"])
    func anInvalidSocketModeIsRefusedAtStart(mode: String) async throws {
        let files = ChildGatewayFiles("sb-badmode")
        defer { files.remove() }
        let gateway = try ProcessTests.startGateway(
            socketPath: files.socket.path, database: files.database.path, options: ["--unix-socket-mode", mode])
        defer { gateway.killAndWait() }
        #expect(await gateway.waitForExit(seconds: 30) == 64)
        #expect(access(files.socket.path, F_OK) != 0)
        #expect(access(files.database.path, F_OK) != 0)
    }
}
