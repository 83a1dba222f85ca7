import ArgumentParser
import Foundation
import Logging
import Metrics
import NIOCore
import Prometheus
import ServiceLifecycle
import SwitchboardServer
import SwitchboardStore
import UnixSignals

@main
struct SwitchboardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "switchboard",
        abstract: "Switchboard: a real-time state gateway (metadata, presence, events, profiles) over TCP and Unix sockets.",
        discussion: """
            Every option can also be given as an environment variable: SWITCHBOARD_ followed by the option's name in \
            upper case with dashes as underscores (--max-connections -> SWITCHBOARD_MAX_CONNECTIONS). A command-line \
            option wins over the environment.
            """,
        subcommands: [Serve.self, Token.self],
        defaultSubcommand: Serve.self)

    static func main() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        arguments = EnvironmentOptions.merge(arguments: arguments, environment: ProcessInfo.processInfo.environment)
        do {
            var command = try parseAsRoot(arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}

/// Adds `SWITCHBOARD_*` environment variables as options the command line did not give.
enum EnvironmentOptions {
    static let serveOptions = [
        "tcp", "unix-socket", "unix-socket-mode", "database", "threads", "token-secret", "token-secret-file", "max-connections",
        "max-frame-size", "max-inflated-size", "rate-limit", "rate-burst", "max-subscriptions", "max-inflight",
        "outbound-high-water", "outbound-hard-cap", "heartbeat-ms", "heartbeat-misses", "handshake-timeout-ms",
        "compression-threshold", "shutdown-grace-ms", "metrics-port", "metrics-host", "log-level", "durability", "commit-on", "write-behind-ms", "unawaited-write-delay-ms", "provider-timeout-ms",
        "presence-timeout", "presence-interval-threshold", "presence-interval-ms",
    ]

    static func merge(arguments: [String], environment: [String: String]) -> [String] {
        // Only for the serve command (the default); `token` reads SWITCHBOARD_TOKEN_SECRET itself.
        if let first = arguments.first, !first.hasPrefix("-"), first != "serve" { return arguments }
        var merged = arguments
        for option in serveOptions {
            let name = "SWITCHBOARD_" + option.uppercased().replacingOccurrences(of: "-", with: "_")
            guard let value = environment[name], !arguments.contains(where: { $0 == "--\(option)" || $0.hasPrefix("--\(option)=") })
            else { continue }
            merged.append("--\(option)=\(value)")
        }
        return merged
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Runs the gateway (the default command).")

    @Option(help: "TCP listener as host:port, or \"off\".")
    var tcp = "127.0.0.1:7400"

    @Option(name: .customLong("unix-socket"), help: "Unix domain socket path, or \"off\". A stale socket file is replaced; a live one is not.")
    var unixSocket = "./switchboard.sock"

    @Option(name: .customLong("unix-socket-mode"), help: "Permissions of the Unix socket file, in octal (0600: its owner only; 0660 lets the owner's group connect too).")
    var unixSocketMode = "0600"

    @Option(help: "SQLite database file.")
    var database = "./switchboard.sqlite"

    @Option(help: "When a write is acknowledged: \"commit\" (after its SQLite transaction committed; group commit) or \"apply\" (at once, before the commit: faster, but a crash loses the writes of the last batch).")
    var durability = "commit"

    @Option(help: "Who commits durable metadata writes (--durability commit): \"loop\" (each event loop, once per tick, for every write it read in that tick: no thread hand-over, like Redis's appendfsync always; the loop waits for the commit's sync), \"writer\" (the store's writer thread, as writes arrive, while the loops go on reading) or \"auto\" (loop with one event loop thread, writer with more).")
    var commitOn = "auto"

    @Option(name: .customLong("write-behind-ms"), help: "With --durability apply: how long the writer lets writes gather before it commits them, 0-1000 (0: at once). Fewer, larger transactions leave more CPU to the event loops; also the most a crash loses beyond the batch being written.")
    var writeBehindMs: UInt64 = 5

    @Option(name: .customLong("unawaited-write-delay-ms"), help: "How long an event or profile write nobody waits for (a provider's answer, an online state, a last-logout time) waits for others to share its transaction, 0-1000 (0: at once). Fewer commits leave more CPU to the event loops; also the most of such writes a crash loses (none of them was acknowledged).")
    var unawaitedWriteDelayMs: UInt64 = UInt64(GroupCommitDefaults.unawaitedWriteDelayMs)

    @Option(help: "Event loop threads (1 is best when clients share this machine's two cores).")
    var threads = 1

    @Option(name: .customLong("token-secret"), help: "HMAC secret for login tokens. Without a secret the gateway runs in open development mode: any user id is accepted, and only loopback listeners are allowed.")
    var tokenSecret: String?

    @Option(name: .customLong("token-secret-file"), help: "Read the token secret from this file.")
    var tokenSecretFile: String?

    @Option(name: .customLong("max-connections"), help: "Open connections at most (error 3002).")
    var maxConnections = 100_000

    @Option(name: .customLong("max-frame-size"), help: "Largest frame in bytes after the handshake (error 1001).")
    var maxFrameSize = 1 << 20

    @Option(name: .customLong("max-inflated-size"), help: "Largest inflated body of a compressed frame (error 1010).")
    var maxInflatedSize = 1 << 20

    @Option(name: .customLong("rate-limit"), help: "Requests per second per connection, 0 for no limit (error 3000).")
    var rateLimit = 20_000

    @Option(name: .customLong("rate-burst"), help: "Requests a connection may send in a burst.")
    var rateBurst = 40_000

    @Option(name: .customLong("max-subscriptions"), help: "Subscriptions per connection (error 3003).")
    var maxSubscriptions = 10_000

    @Option(name: .customLong("max-inflight"), help: "Unanswered requests per connection (error 3001).")
    var maxInflight = 128

    @Option(name: .customLong("outbound-high-water"), help: "Queued outbound bytes above which the server stops reading a connection.")
    var outboundHighWater = 1 << 20

    @Option(name: .customLong("outbound-hard-cap"), help: "Queued outbound bytes above which a connection is cut as a slow consumer (error 3004).")
    var outboundHardCap = 8 << 20

    @Option(name: .customLong("heartbeat-ms"), help: "Heartbeat interval granted by default (clients may ask for 1000-300000).")
    var heartbeatMs = 15_000

    @Option(name: .customLong("heartbeat-misses"), help: "Silent heartbeat intervals before a session ends as abnormal (error 1009).")
    var heartbeatMisses = 3

    @Option(name: .customLong("handshake-timeout-ms"), help: "Time a new connection has to send HELLO (error 1007).")
    var handshakeTimeoutMs = 10_000

    @Option(name: .customLong("compression-threshold"), help: "Bodies at least this long are compressed for clients that negotiated zlib.")
    var compressionThreshold = 512

    @Option(name: .customLong("shutdown-grace-ms"), help: "On SIGTERM/SIGINT, time given to in-flight requests before connections are closed.")
    var shutdownGraceMs = 10_000

    @Option(name: .customLong("presence-timeout"), help: "Seconds (5-300) a user whose session ended abnormally stays in their channels before others see remoteTimeout.")
    var presenceTimeout = 30

    @Option(name: .customLong("presence-interval-threshold"), help: "Above this many members (8-128) a channel sends one presence interval event per interval instead of one event per change.")
    var presenceIntervalThreshold = 50

    @Option(name: .customLong("presence-interval-ms"), help: "How often a channel in interval mode sends its presence interval event.")
    var presenceIntervalMs = 1_000

    @Option(name: .customLong("provider-timeout-ms"), help: "How long a read waits for a profile provider's answer (then: missing, or 8003).")
    var providerTimeoutMs = 5_000

    @Option(name: .customLong("metrics-port"), help: "Serve Prometheus metrics on METRICS-HOST:PORT/metrics and the gateway's health on /health (200, or 503 while starting or draining).")
    var metricsPort: Int?

    @Option(name: .customLong("metrics-host"), help: "The address the metrics endpoint binds (with --metrics-port): 127.0.0.1 by default; 0.0.0.0 or :: for every interface.")
    var metricsHost = "127.0.0.1"

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel = "info"

    func configuration() throws -> ServerConfiguration {
        var configuration = ServerConfiguration()
        if self.tcp == "off" {
            configuration.tcpHost = nil
        } else {
            guard let colon = self.tcp.lastIndex(of: ":"), let port = Int(self.tcp[self.tcp.index(after: colon)...]) else {
                throw ValidationError("--tcp must be host:port or off")
            }
            configuration.tcpHost = String(self.tcp[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
            configuration.tcpPort = port
        }
        configuration.unixSocketPath = self.unixSocket == "off" ? nil : self.unixSocket
        guard let mode = UInt32(self.unixSocketMode, radix: 8), mode <= 0o777 else {
            throw ValidationError("--unix-socket-mode must be an octal mode 0000-0777, such as 0600")
        }
        configuration.unixSocketMode = mode
        configuration.databasePath = self.database
        configuration.eventLoopThreads = self.threads
        if let file = self.tokenSecretFile {
            let text = try String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            configuration.tokenSecret = Array(text.utf8)
        } else if let secret = self.tokenSecret {
            configuration.tokenSecret = Array(secret.utf8)
        }
        configuration.limits.maxConnections = self.maxConnections
        configuration.limits.maxFrameSize = self.maxFrameSize
        configuration.limits.maxInflatedSize = self.maxInflatedSize
        configuration.limits.requestsPerSecond = self.rateLimit
        configuration.limits.requestBurst = self.rateBurst
        configuration.limits.maxSubscriptionsPerConnection = self.maxSubscriptions
        configuration.limits.maxInflight = self.maxInflight
        configuration.limits.outboundHighWaterMark = self.outboundHighWater
        configuration.limits.outboundLowWaterMark = max(1, self.outboundHighWater / 4)
        configuration.limits.outboundHardCap = self.outboundHardCap
        configuration.heartbeat.defaultInterval = .milliseconds(Int64(self.heartbeatMs))
        configuration.heartbeat.misses = self.heartbeatMisses
        configuration.handshakeTimeout = .milliseconds(Int64(self.handshakeTimeoutMs))
        configuration.compressionThreshold = self.compressionThreshold
        configuration.shutdownGracePeriod = .milliseconds(Int64(self.shutdownGraceMs))
        return configuration
    }

    func run() async throws {
        let configuration = try self.configuration()
        guard self.durability == "commit" || self.durability == "apply" else {
            throw ValidationError("--durability must be commit or apply")
        }
        guard ["auto", "loop", "writer"].contains(self.commitOn) else {
            throw ValidationError("--commit-on must be auto, loop or writer")
        }
        guard self.writeBehindMs <= 1_000 else {
            throw ValidationError("--write-behind-ms must be 0-1000")
        }
        guard self.unawaitedWriteDelayMs <= 1_000 else {
            throw ValidationError("--unawaited-write-delay-ms must be 0-1000")
        }
        var presenceConfiguration = PresenceConfiguration()
        presenceConfiguration.presenceTimeout = .seconds(Int64(self.presenceTimeout))
        presenceConfiguration.intervalThreshold = self.presenceIntervalThreshold
        presenceConfiguration.interval = .milliseconds(Int64(self.presenceIntervalMs))
        do {
            try presenceConfiguration.validate()
        } catch {
            throw ValidationError(error.description)
        }
        guard let level = Logger.Level(rawValue: self.logLevel) else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "switchboard")
        var applicationConfiguration = GatewayApplication.Configuration(server: configuration)
        var metricsPrometheus: PrometheusMetrics?
        if let port = self.metricsPort {
            guard (0...65_535).contains(port) else { throw ValidationError("--metrics-port must be 0-65535") }
            guard !self.metricsHost.isEmpty else { throw ValidationError("--metrics-host needs an address") }
            // The application keeps the metrics in a registry of its own (help text for every family, buckets
            // from 50 µs); the global MetricsSystem gets it too, for any library that records through it.
            let metrics = PrometheusMetrics()
            MetricsSystem.bootstrap(metrics.factory)
            applicationConfiguration.metricsPort = port
            let host = self.metricsHost.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
            applicationConfiguration.metricsHost = host
            metricsPrometheus = metrics
        }
        if configuration.tokenSecret == nil {
            logger.warning("no token secret: open development mode, any user id is accepted (loopback only)")
        }
        var storeConfiguration = StoreConfiguration()
        storeConfiguration.durability = self.durability == "commit" ? .acknowledgeAfterCommit : .acknowledgeBeforeCommit
        // One loop: committing in place is cheapest (no hand-over). Several: a loop waiting for a sync would hold up
        // its connections while the others' writes queue behind it; the writer thread overlaps the sync with reading.
        let commitsOnLoop = self.commitOn == "loop" || (self.commitOn == "auto" && self.threads == 1)
        storeConfiguration.commitDriver = commitsOnLoop ? .caller : .writerQueue
        storeConfiguration.writeBehindDelayMs = self.writeBehindMs
        applicationConfiguration.store = storeConfiguration
        applicationConfiguration.presence = presenceConfiguration
        applicationConfiguration.unawaitedWriteDelayMs = Int(self.unawaitedWriteDelayMs)
        applicationConfiguration.providerTimeout = .milliseconds(Int64(self.providerTimeoutMs))
        let application = GatewayApplication(
            configuration: applicationConfiguration, metrics: metricsPrometheus, logger: logger,
            onServerRunning: { _ in SecondSignal.exitImmediately(logger: logger) })
        do {
            try await application.runService(gracefulShutdownSignals: [.sigterm, .sigint])
        } catch is DatabaseLockError {
            throw ExitCode(3)  // the application logged it as critical ("…; refusing to start")
        }
        logger.info("switchboard stopped")
    }
}

/// A second SIGINT or SIGTERM during graceful shutdown exits at once.
enum SecondSignal {
    nonisolated(unsafe) static var sources: [any DispatchSourceSignal] = []

    static func exitImmediately(logger: Logger) {
        let counter = SignalCounter()
        for signalNumber in [SIGINT, SIGTERM] {
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler {
                if counter.increment() >= 2 {
                    logger.warning("second signal: exiting without waiting")
                    exit(130)
                }
            }
            source.resume()
            sources.append(source)
        }
    }

    final class SignalCounter: @unchecked Sendable {
        // Only touched on the global queue's serial signal handlers; the lock makes concurrent delivery safe.
        private let lock = NSLock()
        private var count = 0
        func increment() -> Int {
            self.lock.lock()
            defer { self.lock.unlock() }
            self.count += 1
            return self.count
        }
    }
}

struct Token: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mints a login token with the configured secret (--token-secret, --token-secret-file or SWITCHBOARD_TOKEN_SECRET).")

    @Option(help: "The user the token is for.")
    var user: String

    @Option(help: "Time to live: seconds, or with a unit: 90s, 30m, 1h, 7d.")
    var ttl = "1h"

    @Flag(help: "Grant the admin role (act for any user).")
    var admin = false

    @Option(name: .customLong("token-secret"), help: "HMAC secret.")
    var tokenSecret: String?

    @Option(name: .customLong("token-secret-file"), help: "Read the secret from this file.")
    var tokenSecretFile: String?

    func run() throws {
        let secret: String
        if let file = self.tokenSecretFile {
            secret = try String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        } else if let given = self.tokenSecret ?? ProcessInfo.processInfo.environment["SWITCHBOARD_TOKEN_SECRET"] {
            secret = given
        } else {
            throw ValidationError("no secret: give --token-secret, --token-secret-file or SWITCHBOARD_TOKEN_SECRET")
        }
        guard let seconds = Self.parseDuration(self.ttl), seconds > 0 else {
            throw ValidationError("--ttl must be like 3600, 90s, 30m, 1h or 7d")
        }
        let now = Int64(Date().timeIntervalSince1970)
        guard seconds <= Self.latestExpiry - now else {
            throw ValidationError("--ttl is too long: a token must expire within \(Self.latestExpiry - now) s")
        }
        let expiresAt = now + seconds
        let authority = TokenAuthority(secret: Array(secret.utf8))
        print(authority.mint(userID: self.user, expiresAt: expiresAt, role: self.admin ? .admin : .user))
    }

    /// The latest token expiry (s since the epoch) whose value in ms still fits an `Int64`, as the gateway keeps it.
    static let latestExpiry = Int64.max / 1000

    /// Seconds in `text` (a number, or one with a unit s, m, h or d); nil when it is not one or does not fit an `Int64`.
    static func parseDuration(_ text: String) -> Int64? {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        if let last = text.last, let unit = units[last] {
            guard let count = Int64(text.dropLast()) else { return nil }
            let (seconds, overflowed) = count.multipliedReportingOverflow(by: unit)
            return overflowed ? nil : seconds
        }
        return Int64(text)
    }
}
