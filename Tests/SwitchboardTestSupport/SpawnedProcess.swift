#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// A child process started with `posix_spawn`, for the tests that run the real executables.
///
/// Foundation's `Process.run()` on Linux (swift-corelibs-foundation in Swift 6.3.1) can crash the whole test process
/// while it lists `/proc/self/fd` to close inherited descriptors (an over-read of each `dirent`, fixed upstream in
/// swift-corelibs-foundation#5472); the more descriptors are open, as in tests that hold thousands of sockets, the
/// likelier. This starts the child directly, closing every descriptor above 2 in it with
/// `posix_spawn_file_actions_addclosefrom_np`.
public final class SpawnedProcess: Sendable {
    /// Where a standard stream goes.
    public enum Stream: Sendable {
        /// This process's own.
        case inherit
        /// `/dev/null`.
        case null
        /// A file, created or truncated (output) or read from its start (input).
        case file(String)
        /// A pipe whose other end this object keeps (standard input only: ``write(_:)``, ``closeInput()``).
        case pipe
    }

    /// A spawn that failed, with the system's error.
    public struct SpawnError: Error, CustomStringConvertible {
        public var description: String
    }

    /// The child's process id.
    public let pid: pid_t
    private let state: Mutex<(exit: Int32?, input: Int32)>

    /// Starts `executable` with `arguments` (not counting the program name) and `environment` (this process's
    /// when nil).
    ///
    /// A child inherits the signal mask of the thread that spawns it, and test threads block most signals; with
    /// `unblockSignals` it starts with none blocked, as from a shell (tmux, whose server relies on SIGCHLD and
    /// SIGTERM, needs that).
    /// - Throws: ``SpawnError`` when the child cannot be started.
    public init(
        executable: String, arguments: [String], environment: [String: String]? = nil,
        stdin: Stream = .null, stdout: Stream = .inherit, stderr: Stream = .inherit, unblockSignals: Bool = false
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var inputWriter: Int32 = -1
        var childReader: Int32 = -1
        switch stdin {
        case .pipe:
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else { throw SpawnError(description: "pipe: \(String(cString: strerror(errno)))") }
            // Other children close every inherited descriptor above 2 themselves (closeFrom below); this covers
            // programs spawned any other way.
            _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
            childReader = ends[0]
            inputWriter = ends[1]
            posix_spawn_file_actions_adddup2(&actions, childReader, 0)
        case .null:
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        case .file(let path):
            posix_spawn_file_actions_addopen(&actions, 0, path, O_RDONLY, 0)
        case .inherit:
            break
        }
        for (descriptor, stream) in [(Int32(1), stdout), (Int32(2), stderr)] {
            switch stream {
            case .file(let path): posix_spawn_file_actions_addopen(&actions, descriptor, path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            case .null: posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", O_WRONLY, 0)
            case .inherit, .pipe: break
            }
        }
        Self.closeFrom(3, &actions)

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let variables = (environment ?? Self.currentEnvironment()).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in variables { free(pointer) } }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        if unblockSignals {
            var none = sigset_t()
            sigemptyset(&none)
            posix_spawnattr_setsigmask(&attributes, &none)
            posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, variables)
        if childReader >= 0 { close(childReader) }
        guard result == 0 else {
            if inputWriter >= 0 { close(inputWriter) }
            throw SpawnError(description: "posix_spawn \(executable): \(String(cString: strerror(result)))")
        }
        self.pid = pid
        self.state = Mutex((nil, inputWriter))
    }

    deinit {
        self.killAndWait()
        let input = self.state.withLock { $0.input }
        if input >= 0 { close(input) }
    }

    /// Whether the child has not exited yet (reaps it when it has).
    public var isRunning: Bool { self.exitStatusNow() == nil }

    /// The exit status (128 + signal number when a signal ended it), or nil while it runs.
    public func exitStatusNow() -> Int32? {
        self.state.withLock { state in
            if let exit = state.exit { return exit }
            var status: Int32 = 0
            guard waitpid(self.pid, &status, WNOHANG) == self.pid else { return nil }
            state.exit = Self.exitStatus(status)
            return state.exit
        }
    }

    /// Kills the child with SIGKILL unless it has exited, and waits until it is gone (a blocking `waitpid`, short
    /// after SIGKILL), so that nothing it writes can appear after the caller removes its files.
    public func killAndWait() {
        self.state.withLock { state in
            guard state.exit == nil else { return }
            kill(self.pid, SIGKILL)
            var status: Int32 = 0
            var result: pid_t
            repeat { result = waitpid(self.pid, &status, 0) } while result < 0 && errno == EINTR
            state.exit = result == self.pid ? Self.exitStatus(status) : 128 + SIGKILL
        }
    }

    /// `waitpid`'s status as an exit status: the program's, or 128 + the number of the signal that ended it.
    private static func exitStatus(_ status: Int32) -> Int32 {
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// Waits (polling, without blocking a thread) until the child exits, or `seconds` pass: the status, or nil.
    public func waitForExit(seconds: Double = 60) async -> Int32? {
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        while ContinuousClock.now < deadline {
            if let status = self.exitStatusNow() { return status }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return self.exitStatusNow()
    }

    /// Sends `signal` to the child.
    public func signal(_ signal: Int32) {
        kill(self.pid, signal)
    }

    /// Writes to the child's standard input (``Stream/pipe``).
    public func write(_ bytes: [UInt8]) throws {
        let input = self.state.withLock { $0.input }
        guard input >= 0 else { throw SpawnError(description: "standard input is not a pipe, or is closed") }
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { Glibc.write(input, $0.baseAddress! + written, bytes.count - written) }
            if result < 0 {
                if errno == EINTR { continue }
                throw SpawnError(description: "write: \(String(cString: strerror(errno)))")
            }
            written += result
        }
    }

    /// Closes the child's standard input (end of input for it).
    public func closeInput() {
        let input = self.state.withLock { state in
            defer { state.input = -1 }
            return state.input
        }
        if input >= 0 { close(input) }
    }

    private static func currentEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        return result
    }

    /// `posix_spawn_file_actions_addclosefrom_np` (glibc 2.34+), which Swift's Glibc module does not declare.
    private static func closeFrom(_ lowest: Int32, _ actions: inout posix_spawn_file_actions_t) {
        typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else {
            return
        }
        _ = unsafeBitCast(symbol, to: AddCloseFrom.self)(&actions, lowest)
    }
}
