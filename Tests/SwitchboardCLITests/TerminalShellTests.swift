#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SwitchboardTestSupport
import Testing

/// A terminal for one test: a tmux server of its own (its own socket name, no configuration file) with one session
/// running a command, driven with `send-keys` and read with `capture-pane`. `make test` installs tmux.
final class TmuxTerminal {
    static let executable = "/usr/bin/tmux"
    private let server = "sbctl-test-\(UInt32.random(in: 0...UInt32.max))"
    private let configuration = TemporaryPath("sbctl-tmux", suffix: ".conf")
    private let environment: [String: String]

    /// Starts `command` (a shell command line) in a `columns` × `rows` terminal; the pane stays after the command
    /// exits, so that what it printed last can be read.
    init(command: String, columns: Int = 120, rows: Int = 40, environment: [String: String]) async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.executable), "tmux is missing: make test installs it")
        var childEnvironment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SWITCHBOARD_") }
        childEnvironment.removeValue(forKey: "TMUX")  // a tmux the tests run inside must not be used
        childEnvironment["TERM"] = childEnvironment["TERM"] ?? "xterm"
        childEnvironment.merge(environment) { $1 }
        self.environment = childEnvironment
        try "set -g remain-on-exit on\n".write(toFile: self.configuration.path, atomically: true, encoding: .utf8)
        _ = try await self.tmux([
            "-f", self.configuration.path, "new-session", "-d", "-x", "\(columns)", "-y", "\(rows)", "-s", "main",
            command,
        ])
    }

    deinit {
        _ = try? SpawnedProcess(
            executable: Self.executable, arguments: ["-L", self.server, "kill-server"], environment: self.environment,
            stdout: .null, stderr: .null, unblockSignals: true
        ).waitForExitBlocking()
        self.configuration.remove()
    }

    /// Runs a tmux command against this test's server and returns what it printed.
    @discardableResult
    func tmux(_ arguments: [String]) async throws -> String {
        let output = TemporaryPath("sbctl-tmux-out", suffix: ".txt")
        defer { output.remove() }
        let process = try SpawnedProcess(
            executable: Self.executable, arguments: ["-L", self.server] + arguments, environment: self.environment,
            stdout: .file(output.path), stderr: .file(output.path), unblockSignals: true)
        let status = await process.waitForExit(seconds: 20)
        let text = (try? String(contentsOfFile: output.path, encoding: .utf8)) ?? ""
        try #require(status == 0, "tmux \(arguments) exited \(status.map(String.init) ?? "late"): \(text)")
        return text
    }

    /// Types `text` literally.
    func type(_ text: String) async throws {
        try await self.tmux(["send-keys", "-t", "main", "-l", "--", text])
    }

    /// Presses keys by tmux's names (`Left`, `Home`, `C-c`, `Enter`).
    func press(_ keys: String...) async throws {
        try await self.tmux(["send-keys", "-t", "main"] + keys)
    }

    /// The screen's rows, trailing blanks removed, without the empty rows at the bottom.
    func screen() async throws -> [String] {
        var rows = try await self.tmux(["capture-pane", "-p", "-t", "main"]).split(separator: "\n", omittingEmptySubsequences: false)
            .map { String($0.reversed().drop(while: { $0 == " " }).reversed()) }
        while rows.last?.isEmpty == true { rows.removeLast() }
        return rows
    }

    /// The cursor's column and row (from 0).
    func cursor() async throws -> (column: Int, row: Int) {
        let parts = try await self.tmux(["display-message", "-p", "-t", "main", "#{cursor_x} #{cursor_y}"])
            .split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
        try #require(parts.count == 2)
        return (parts[0], parts[1])
    }

    /// Waits until `condition` holds for the screen, and records an issue showing the screen when it does not within
    /// `seconds`.
    func expectScreen(
        _ what: String, within seconds: Double = 20, sourceLocation: SourceLocation = #_sourceLocation,
        _ condition: ([String]) -> Bool
    ) async throws {
        guard try await !self.waitForScreen(within: seconds, condition) else { return }
        let screen = try await self.screen().joined(separator: "\n")
        Issue.record("\(what); the screen:\n\(screen)", sourceLocation: sourceLocation)
    }

    /// Waits until `condition` holds for the screen; false after `seconds`.
    func waitForScreen(within seconds: Double = 20, _ condition: ([String]) -> Bool) async throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition(try await self.screen()) { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return condition(try await self.screen())
    }
}

extension SpawnedProcess {
    /// Waits for the exit with a blocking `waitpid` loop (for `deinit`, which cannot await); at most 10 s.
    func waitForExitBlocking() -> Int32? {
        for _ in 0..<1000 {
            if let status = self.exitStatusNow() { return status }
            usleep(10_000)
        }
        return nil
    }
}

/// Quotes a word for `sh`.
private func shellQuoted(_ word: String) -> String {
    "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
}

/// sbctl shell on a real terminal (tmux), and plain connection errors: in the serialized end-to-end suite, so that
/// these child processes do not add to the load the other child-process tests run under (timing-sensitive tests of
/// other suites, such as sbbench's heartbeat run, started failing when this ran beside them).
extension EndToEndTests {
    @Test("the shell edits lines, recalls history, clears a line on Ctrl-C, redraws around pushes and leaves on Ctrl-D")
    func shellOnATerminal() async throws {
        try await withChildGateway { gateway in
            let history = TemporaryPath("sbctl-tty-history")
            defer { history.remove() }
            let command = [Executables.sbctl.path, "--unix", gateway.socketPath, "--user", "Tony", "shell"]
                .map(shellQuoted).joined(separator: " ") + #"; echo "[sbctl exited $?]""#  // what tmux shows of it
            let terminal = try await TmuxTerminal(command: command, environment: ["SBCTL_HISTORY": history.path])
            let prompt = "sbctl>"
            func lastRow(_ screen: [String]) -> String { screen.last ?? "" }
            func count(_ text: String, in screen: [String]) -> Int { screen.filter { $0 == text }.count }
            try await terminal.expectScreen("a prompt") { lastRow($0) == prompt }

            // A typo fixed by moving the cursor: "st" becomes "set" with the cursor 7 characters back.
            try await terminal.type("user-meta st - a=1")
            try await terminal.press("Left", "Left", "Left", "Left", "Left", "Left", "Left")
            try await terminal.type("e")
            try await terminal.press("Enter")
            try await terminal.expectScreen("the corrected command ran") {
                $0.contains("sbctl> user-meta set - a=1") && $0.contains("majorRevision 1")
            }
            // Home (the start of the line) puts the missing first word in front.
            try await terminal.type("meta get")
            try await terminal.press("Home")
            try await terminal.type("user-")
            try await terminal.press("Enter")
            try await terminal.expectScreen("user-meta get ran") { count("user Tony majorRevision 1", in: $0) == 1 }

            // History: Up twice reaches the first command, Down comes back to the second, which runs again.
            try await terminal.press("Up")
            try await terminal.expectScreen("Up recalled the last command") { lastRow($0) == "sbctl> user-meta get" }
            try await terminal.press("Up")
            try await terminal.expectScreen("Up recalled the first command") {
                lastRow($0) == "sbctl> user-meta set - a=1"
            }
            try await terminal.press("Down", "Enter")
            try await terminal.expectScreen("the recalled command ran") { count("user Tony majorRevision 1", in: $0) == 2 }

            // Ctrl-C on a half-typed line clears it: the next command is not appended to it.
            try await terminal.type("who-now lob")
            try await terminal.press("C-c")
            try await terminal.expectScreen("Ctrl-C left the line and started an empty one") {
                lastRow($0) == prompt && $0.contains("sbctl> who-now lob^C")
            }
            try await terminal.type("where-now")
            try await terminal.press("Enter")
            try await terminal.expectScreen("where-now ran alone") {
                $0.contains("totalChannel 0") && $0.allSatisfy { !$0.contains("error") }
            }

            // A push while a line is half typed, the cursor inside it: the prompt line is drawn again intact below
            // the push, with the cursor where it was.
            try await terminal.type("channel subscribe lobby")
            try await terminal.press("Enter")
            try await terminal.expectScreen("the subscription's snapshot") {
                $0.contains { $0.hasPrefix("presenceEvent snapshot lobby") }
            }
            try await terminal.type("user-meta get Tny")
            try await terminal.press("Left", "Left")
            try await terminal.expectScreen("the partial line") { lastRow($0) == "sbctl> user-meta get Tny" }
            let before = try await terminal.cursor()
            #expect(before.column == 22)
            let ann = try await gateway.sbctl(["channel", "subscribe", "lobby"], user: "Ann")
            #expect(ann.status == 0, "\(ann.errorOutput)")
            try await terminal.expectScreen("Ann's join and leave") {
                $0.contains { $0.hasPrefix("presenceEvent remoteJoin lobby") }
                    && $0.contains { $0.hasPrefix("presenceEvent remoteLeave lobby") }
            }
            let screen = try await terminal.screen()
            #expect(lastRow(screen) == "sbctl> user-meta get Tny", "\(screen)")
            #expect(count("sbctl> user-meta get Tny", in: screen) == 1, "the partial line is drawn once: \(screen)")
            let after = try await terminal.cursor()
            #expect(after.column == before.column)
            #expect(after.row == screen.count - 1)
            try await terminal.type("o")
            try await terminal.press("Enter")
            try await terminal.expectScreen("the completed line ran") { count("user Tony majorRevision 1", in: $0) == 3 }

            // Keys typed while a command runs are kept, not echoed by the terminal: Ctrl-D is read at the next
            // prompt, where, on the empty line, it leaves with the last command's status.
            try await terminal.press("C-d")
            try await terminal.expectScreen("sbctl exited with status 0 after an empty prompt") { screen in
                guard let index = screen.firstIndex(of: "[sbctl exited 0]") else { return false }
                return index > 0 && screen[index - 1] == prompt
            }
            #expect(try await terminal.screen().contains("sbctl> who-now lob^C"))
            let saved = try String(contentsOfFile: history.path, encoding: .utf8)
            #expect(saved == """
                user-meta set - a=1
                user-meta get
                user-meta get
                where-now
                channel subscribe lobby
                user-meta get Tony

                """)
        }
    }

    @Test("a TCP port nothing listens on is reported in plain words, exit 69")
    func connectionRefusedInPlainWords() async throws {
        // A bound socket that never listens: connecting to its port is refused, and nobody else can take it.
        let unlistened = try BoundLoopbackSocket()
        let port = unlistened.port

        let child = try ChildProcess(Executables.sbctl, ["where-now", "--tcp", "127.0.0.1:\(port)", "--user", "Tony"])
        #expect(await child.exitStatus() == 69)
        #expect(child.errorOutput
            == "error unavailable: cannot connect to 127.0.0.1:\(port): connection refused: is the gateway running?\n")
        #expect(child.output.isEmpty)
        withExtendedLifetime(unlistened) {}  // the port stays refused until the child is done
    }

    @Test("a Unix socket path that does not exist is reported in plain words, exit 69")
    func missingSocketInPlainWords() async throws {
        let path = TemporaryPath.socket("sbctl-none")
        let child = try ChildProcess(Executables.sbctl, ["info", "--unix", path.path, "--user", "Tony"])
        #expect(await child.exitStatus() == 69)
        #expect(child.errorOutput == "error unavailable: cannot connect to unix:\(path.path): no such socket file: "
            + "is the gateway running, and is this its --unix-socket path?\n")
    }
}
