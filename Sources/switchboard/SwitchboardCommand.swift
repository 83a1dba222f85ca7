import ArgumentParser
import Configuration
import Foundation
import Logging
import Metrics
import NIOCore
import Prometheus
import ServiceLifecycle
import SwitchboardCLI
import SwitchboardCluster
import SwitchboardHTTPAPI
import SwitchboardServer
import SwitchboardStore
import SwitchboardWebhooks
import SwitchboardWire
import UnixSignals

/// `switchboard [serve] OPTIONS` runs the gateway, `switchboard token` mints a token.
///
/// The serve options are the root command's own, so that `switchboard --help` lists them (with the subcommands
/// after them); `switchboard serve OPTIONS` parses the same options (``ServeOptions``) and does the same.
@main
struct SwitchboardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "switchboard",
        abstract: "Switchboard: a real-time state gateway (metadata, presence, events, profiles) over TCP and Unix sockets.",
        usage: """
            switchboard [serve] [<options>]
            switchboard token --user <user> [<options>]
            """,
        discussion: """
            Without a subcommand, or with serve, it runs the gateway with the options below. Every option can also \
            be given as an environment variable (SWITCHBOARD_ followed by the option's name in upper case with \
            dashes as underscores: --max-connections -> SWITCHBOARD_MAX_CONNECTIONS) or as a key of the JSON \
            configuration file named by --config or SWITCHBOARD_CONFIG ({"max-connections": 1000}). The command \
            line wins over the environment, the environment over the file, the file over the defaults. A number \
            outside its range stops the start (exit status 64). SIGTERM or SIGINT stops the gateway gracefully; \
            SIGHUP reloads the TLS certificate and key, the --token-secret-file, the --token-key files and the --jwks-file.
            """,
        version: SwitchboardVersion.current,
        subcommands: [Serve.self, Token.self])

    @OptionGroup var options: ServeOptions

    func run() async throws {
        try await self.options.run()
    }
}

/// `switchboard serve`: the same as `switchboard` without a subcommand.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Runs the gateway (the default command: `switchboard OPTIONS` is `switchboard serve OPTIONS`).")

    @OptionGroup var options: ServeOptions

    /// The options given on the command line, by key (``ServeSettings/keys``).
    var commandLineValues: [String: ConfigContent] { self.options.commandLineValues }

    /// The settings from the command line, `environment` and the configuration file.
    func settings(environment: [String: String]) async throws(SettingsError) -> ServeSettings {
        try await self.options.settings(environment: environment)
    }

    func run() async throws {
        try await self.options.run()
    }
}

/// The options of the gateway, each a key of ``ServeSettings``.
struct ServeOptions: ParsableArguments {
    private static let defaults = ServeSettings()

    @Option(help: ArgumentHelp(
        "JSON file of settings, keyed by the long options' names, such as {\"token-secret\": \"...\", \"max-connections\": 1000}: a way to keep the secret out of the process list. Also SWITCHBOARD_CONFIG. Unknown keys and values of the wrong type stop the start.",
        valueName: "path"))
    var config: String?

    @Option(help: "TCP listener as host:port, or \"off\" (default: \(defaults.tcp)).")
    var tcp: String?

    @Option(name: .customLong("tls-cert"), help: ArgumentHelp("TLS for the TCP listener: the server certificate chain (PEM, the server's certificate first). Needs --tls-key; the Unix socket stays plain. SIGHUP reads it and the key again.", valueName: "path"))
    var tlsCert: String?

    @Option(name: .customLong("tls-key"), help: ArgumentHelp("TLS for the TCP listener: the certificate's private key (PEM, unencrypted). Needs --tls-cert.", valueName: "path"))
    var tlsKey: String?

    @Option(name: .customLong("websocket"), help: ArgumentHelp("WebSocket listener as host:port, or \"off\": the same frames in binary WebSocket messages, for browsers; wss with --tls-cert and --tls-key (default: \(defaults.websocket)).", valueName: "host:port"))
    var websocket: String?

    @Option(name: .customLong("websocket-path"), help: ArgumentHelp("The path the WebSocket listener accepts upgrades on; others get 404 (default: \(defaults.websocketPath)).", valueName: "path"))
    var websocketPath: String?

    @Option(name: .customLong("websocket-origins"), help: ArgumentHelp("Browser origins the WebSocket listener accepts, comma-separated (https://app.example.com,http://localhost:5173), or * for any; an upgrade with another Origin gets 403, one without an Origin header (non-browser clients) is accepted (default: none).", valueName: "origins"))
    var websocketOrigins: String?

    @Option(name: .customLong("api"), help: ArgumentHelp("HTTP API listener as host:port, or \"off\": the storage, lock, presence-query, event-publish, profile and moderation operations as JSON over HTTP for backends (Docs/http-api.md; its OpenAPI document at /openapi.json); HTTPS with --tls-cert and --tls-key. Requests need an API key (--api-key-file) or an admin token (default: \(defaults.api)).", valueName: "host:port"))
    var api: String?

    @Option(name: .customLong("api-key-file"), help: ArgumentHelp("The HTTP API's keys: one `NAME SECRET` a line (# comments); a request with Authorization: Bearer SECRET runs as the admin user NAME. Secrets are at least 16 bytes.", valueName: "path"))
    var apiKeyFile: String?

    @Option(name: .customLong("webhooks"), help: ArgumentHelp("A JSON file of webhook endpoints: presence, online-state, storage and lock events POSTed to the application's URLs, signed (Standard Webhooks), retried, in order per channel, from a durable outbox in the database file (Docs/webhooks.md).", valueName: "path"))
    var webhooks: String?

    @Option(name: .customLong("unix-socket"), help: "Unix domain socket path, or \"off\". A stale socket file is replaced; a live one is not (default: \(defaults.unixSocket)).")
    var unixSocket: String?

    @Option(name: .customLong("unix-socket-mode"), help: "Permissions of the Unix socket file, in octal (0600: its owner only; 0660 lets the owner's group connect too) (default: \(defaults.unixSocketMode)).")
    var unixSocketMode: String?

    @Option(help: "SQLite database file (default: \(defaults.database)).")
    var database: String?

    @Option(help: "When a write is acknowledged: \"commit\" (after its SQLite transaction committed; group commit) or \"apply\" (at once, before the commit: faster, but a crash loses the writes of the last batch) (default: \(defaults.durability)).")
    var durability: String?

    @Option(help: "Who commits durable metadata writes (--durability commit): \"loop\" (each event loop, once per tick, for every write it read in that tick: no thread hand-over, like Redis's appendfsync always; the loop waits for the commit's sync), \"writer\" (the store's writer thread, as writes arrive, while the loops go on reading) or \"auto\" (loop with one event loop thread, writer with more) (default: \(defaults.commitOn)).")
    var commitOn: String?

    @Option(name: .customLong("write-behind-ms"), help: "With --durability apply: how long the writer lets writes gather before it commits them, 0-1000 (0: at once). Fewer, larger transactions leave more CPU to the event loops; also the most a crash loses beyond the batch being written (default: \(defaults.writeBehindMs)).")
    var writeBehindMs: Int?

    @Option(name: .customLong("unawaited-write-delay-ms"), help: "How long an event or profile write nobody waits for (a provider's answer, an online state, a last-logout time) waits for others to share its transaction, 0-1000 (0: at once). Fewer commits leave more CPU to the event loops; also the most of such writes a crash loses (none of them was acknowledged) (default: \(defaults.unawaitedWriteDelayMs)).")
    var unawaitedWriteDelayMs: Int?

    @Option(help: "Event loop threads, 1-256 (1 is best when clients share this machine's two cores) (default: \(defaults.threads)).")
    var threads: Int?

    @Option(name: .customLong("token-secret"), help: "HMAC secret for login tokens, at least 32 bytes. Without a secret the gateway runs in open development mode: any user id is accepted, and only loopback listeners are allowed. On the command line the secret shows in the process list: prefer --token-secret-file, SWITCHBOARD_TOKEN_SECRET or the configuration file.")
    var tokenSecret: String?

    @Option(name: .customLong("token-secret-file"), help: "Read the token secret from this file: at least 32 bytes without the whitespace around them (wins over --token-secret from the same source). SIGHUP reads it again.")
    var tokenSecretFile: String?

    @Option(name: .customLong("default-grants"), help: ArgumentHelp("The grants of a token without a grants claim, as a JSON array such as [{\"on\":\"message:room:*\",\"allow\":[\"read\",\"presence\"]}], or @PATH to read it from a file. Checked at start. Default: a user's own data only (Protocol/SPEC.md §5.10). Admin tokens and open development mode may do everything.", valueName: "json|@path"))
    var defaultGrants: String?

    @Option(name: .customLong("token-key"), help: ArgumentHelp("A further key for login tokens, chosen by the tokens' kid header: KID=PATH for a PEM public key (RSA: RS256, EC P-256: ES256, Ed25519: EdDSA), KID=hmac:PATH for a file holding an HMAC secret of at least 32 bytes (HS256/384/512). Repeatable; in SWITCHBOARD_TOKEN_KEY or the configuration file one string of pairs separated by commas. SIGHUP reads the files again (Docs/tokens.md).", valueName: "kid=path"))
    var tokenKey: [String] = []

    @Option(name: .customLong("jwks-file"), help: "Login token keys from a JWKS file (RSA, EC P-256, OKP Ed25519, oct keys; each needs a kid). SIGHUP reads it again.")
    var jwksFile: String?

    @Option(name: .customLong("max-connections"), help: "Open connections at most, 1-1000000 (error 3002) (default: \(defaults.maxConnections)).")
    var maxConnections: Int?

    @Option(name: .customLong("max-frame-size"), help: "Largest frame in bytes after the handshake, 16384-268435455 (error 1001) (default: \(defaults.maxFrameSize)).")
    var maxFrameSize: Int?

    @Option(name: .customLong("max-inflated-size"), help: "Largest inflated body of a compressed frame, 16384-268435455 (error 1010) (default: \(defaults.maxInflatedSize)).")
    var maxInflatedSize: Int?

    @Option(name: .customLong("rate-limit"), help: "Requests per second per connection, 0-10000000, 0 for no limit (error 3000) (default: \(defaults.rateLimit)).")
    var rateLimit: Int?

    @Option(name: .customLong("rate-burst"), help: "Requests a connection may send in a burst, 1-100000000 (default: \(defaults.rateBurst)).")
    var rateBurst: Int?

    @Option(name: .customLong("max-subscriptions"), help: "Subscriptions per connection, 1-1000000 (error 3003) (default: \(defaults.maxSubscriptions)).")
    var maxSubscriptions: Int?

    @Option(name: .customLong("max-inflight"), help: "Unanswered requests per connection, 1-100000 (error 3001) (default: \(defaults.maxInflight)).")
    var maxInflight: Int?

    @Option(name: .customLong("outbound-high-water"), help: "Queued outbound bytes above which the server stops reading a connection, 16384-1073741824 (default: \(defaults.outboundHighWater)).")
    var outboundHighWater: Int?

    @Option(name: .customLong("outbound-hard-cap"), help: "Queued outbound bytes above which a connection is cut as a slow consumer (error 3004), 16384-4294967296 and at least --outbound-high-water (default: \(defaults.outboundHardCap)).")
    var outboundHardCap: Int?

    @Option(name: .customLong("heartbeat-ms"), help: "Heartbeat interval granted by default, 1000-300000, the range clients may ask for (default: \(defaults.heartbeatMs)).")
    var heartbeatMs: Int?

    @Option(name: .customLong("heartbeat-misses"), help: "Silent heartbeat intervals before a session ends as abnormal, 1-100 (error 1009) (default: \(defaults.heartbeatMisses)).")
    var heartbeatMisses: Int?

    @Option(name: .customLong("handshake-timeout-ms"), help: "Time a new connection has to send HELLO, 100-300000 (error 1007) (default: \(defaults.handshakeTimeoutMs)).")
    var handshakeTimeoutMs: Int?

    @Option(name: .customLong("compression-threshold"), help: "Bodies at least this long are compressed for clients that negotiated zlib, 0-268435455 (default: \(defaults.compressionThreshold)).")
    var compressionThreshold: Int?

    @Option(name: .customLong("shutdown-grace-ms"), help: "On SIGTERM/SIGINT, time given to in-flight requests before connections are closed, 0-3600000 (default: \(defaults.shutdownGraceMs)).")
    var shutdownGraceMs: Int?

    @Option(name: .customLong("presence-timeout"), help: "Seconds (5-300) a user whose session ended abnormally stays in their channels before others see remoteTimeout (default: \(defaults.presenceTimeout)).")
    var presenceTimeout: Int?

    @Option(name: .customLong("presence-interval-threshold"), help: "Above this many members (8-128) a channel sends one presence interval event per interval instead of one event per change (default: \(defaults.presenceIntervalThreshold)).")
    var presenceIntervalThreshold: Int?

    @Option(name: .customLong("presence-interval-ms"), help: "How often a channel in interval mode sends its presence interval event, 100-60000 (default: \(defaults.presenceIntervalMs)).")
    var presenceIntervalMs: Int?

    @Option(name: .customLong("provider-timeout-ms"), help: "How long a read waits for a profile provider's answer, 100-600000 (then: missing, or 8003) (default: \(defaults.providerTimeoutMs)).")
    var providerTimeoutMs: Int?

    @Option(name: .customLong("event-replay-capacity"), help: "How many online-only events (0-10000000) each node holds for clients that resume after a reconnect (resumeEvents) (default: \(defaults.eventReplayCapacity)).")
    var eventReplayCapacity: Int?

    @Option(name: .customLong("event-replay-seconds"), help: "How long (0-3600 s) each node holds an online-only event for clients that resume after a reconnect (default: \(defaults.eventReplaySeconds)).")
    var eventReplaySeconds: Int?

    @Option(name: .customLong("broadcast-max-bytes"), help: "The longest channel broadcast's data accepted, 1-4096 bytes (longer: 7015) (default: \(defaults.broadcastMaxBytes)).")
    var broadcastMaxBytes: Int?

    @Option(name: .customLong("broadcast-rate"), help: "Channel broadcasts a session may send per second on average, 1-100000 (more: 3010) (default: \(defaults.broadcastRate)).")
    var broadcastRate: Int?

    @Option(name: .customLong("broadcast-burst"), help: "Channel broadcasts a session may send at once after being idle, 1-1000000 (default: \(defaults.broadcastBurst)).")
    var broadcastBurst: Int?

    @Option(name: .customLong("broadcast-rewind-count"), help: "How many of a channel's recent broadcasts each node keeps for rewindBroadcasts, 0-100 (default: \(defaults.broadcastRewindCount)).")
    var broadcastRewindCount: Int?

    @Option(name: .customLong("broadcast-rewind-seconds"), help: "How long (1-300 s) each node keeps a channel broadcast for rewindBroadcasts (default: \(defaults.broadcastRewindSeconds)).")
    var broadcastRewindSeconds: Int?

    @Option(name: .customLong("metrics-port"), help: "Serve Prometheus metrics (PORT 0-65535; 0: any free port) on METRICS-HOST:PORT/metrics and the gateway's health on /health (200, or 503 while starting or draining).")
    var metricsPort: Int?

    @Option(name: .customLong("metrics-host"), help: "The address the metrics endpoint binds (with --metrics-port): 127.0.0.1 by default; 0.0.0.0 or :: for every interface.")
    var metricsHost: String?

    @Option(help: "on or off: whether the metrics endpoint (--metrics-port) also serves the live inspector on /inspector, for admin tokens (default: \(defaults.inspector)).")
    var inspector: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (default: \(defaults.logLevel)).")
    var logLevel: String?

    @Option(name: .customLong("log-format"), help: "text (swift-log's lines) or json (one JSON object per line: time, level, label, message, metadata) (default: \(defaults.logFormat)).")
    var logFormat: String?

    @Option(help: "Run as a node of a cluster whose state lives in this PostgreSQL database (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE). Every node given the same URL shares metadata with its storage events, channel locks, presence, event subscriptions with kept events and online state, and the profile directory with its providers; --database is then not used. Keep a password out of the process list: put it in the --config file or SWITCHBOARD_CLUSTER.")
    var cluster: String?

    @Option(help: "With --cluster: the Redis server (HOST:PORT) that holds the cluster's presence and carries each node's committed changes to the others at once (pub/sub) instead of PostgreSQL NOTIFY. PostgreSQL stays the record of everything else: a change Redis loses is read from it by the next poll.")
    var redis: String?

    /// The options given on the command line, by key (``ServeSettings/keys``); `--config` is not a setting.
    var commandLineValues: [String: ConfigContent] {
        var values: [String: ConfigContent] = [:]
        func put(_ key: String, _ value: String?) {
            if let value { values[key] = .string(value) }
        }
        func put(_ key: String, _ value: Int?) {
            if let value { values[key] = .int(value) }
        }
        put("tcp", self.tcp)
        put("tls-cert", self.tlsCert)
        put("tls-key", self.tlsKey)
        put("websocket", self.websocket)
        put("websocket-path", self.websocketPath)
        put("websocket-origins", self.websocketOrigins)
        put("api", self.api)
        put("api-key-file", self.apiKeyFile)
        put("webhooks", self.webhooks)
        put("unix-socket", self.unixSocket)
        put("unix-socket-mode", self.unixSocketMode)
        put("database", self.database)
        put("durability", self.durability)
        put("commit-on", self.commitOn)
        put("write-behind-ms", self.writeBehindMs)
        put("unawaited-write-delay-ms", self.unawaitedWriteDelayMs)
        put("threads", self.threads)
        put("token-secret", self.tokenSecret)
        put("token-secret-file", self.tokenSecretFile)
        put("default-grants", self.defaultGrants)
        put("token-key", self.tokenKey.isEmpty ? nil : self.tokenKey.joined(separator: ","))
        put("jwks-file", self.jwksFile)
        put("max-connections", self.maxConnections)
        put("max-frame-size", self.maxFrameSize)
        put("max-inflated-size", self.maxInflatedSize)
        put("rate-limit", self.rateLimit)
        put("rate-burst", self.rateBurst)
        put("max-subscriptions", self.maxSubscriptions)
        put("max-inflight", self.maxInflight)
        put("outbound-high-water", self.outboundHighWater)
        put("outbound-hard-cap", self.outboundHardCap)
        put("heartbeat-ms", self.heartbeatMs)
        put("heartbeat-misses", self.heartbeatMisses)
        put("handshake-timeout-ms", self.handshakeTimeoutMs)
        put("compression-threshold", self.compressionThreshold)
        put("shutdown-grace-ms", self.shutdownGraceMs)
        put("presence-timeout", self.presenceTimeout)
        put("presence-interval-threshold", self.presenceIntervalThreshold)
        put("presence-interval-ms", self.presenceIntervalMs)
        put("provider-timeout-ms", self.providerTimeoutMs)
        put("event-replay-capacity", self.eventReplayCapacity)
        put("event-replay-seconds", self.eventReplaySeconds)
        put("broadcast-max-bytes", self.broadcastMaxBytes)
        put("broadcast-rate", self.broadcastRate)
        put("broadcast-burst", self.broadcastBurst)
        put("broadcast-rewind-count", self.broadcastRewindCount)
        put("broadcast-rewind-seconds", self.broadcastRewindSeconds)
        put("metrics-port", self.metricsPort)
        put("metrics-host", self.metricsHost)
        put("log-level", self.logLevel)
        put("log-format", self.logFormat)
        put("inspector", self.inspector)
        put("cluster", self.cluster)
        put("redis", self.redis)
        return values
    }

    /// The settings from the command line, `environment` and the configuration file (`--config`, else
    /// `SWITCHBOARD_CONFIG`), in that order of precedence, over the defaults.
    ///
    /// - Throws: ``SettingsError`` for an unreadable file, an unknown key in it, or a value of the wrong type.
    func settings(environment: [String: String]) async throws(SettingsError) -> ServeSettings {
        let path = self.config ?? environment[ServeSettings.configFileVariable]
        var file: ConfigFile?
        if let path { file = try await ConfigFile.load(path: path) }
        return try ServeSettings.resolve(commandLine: self.commandLineValues, environment: environment, configFile: file)
    }

    func run() async throws {
        let settings: ServeSettings
        do {
            settings = try await self.settings(environment: ProcessInfo.processInfo.environment)
        } catch {
            throw ValidationError(error.description)
        }
        try await settings.serve()
    }
}

extension ServeSettings {
    /// The server configuration these settings describe.
    ///
    /// - Throws: `ValidationError` for a value out of its range or format.
    func serverConfiguration() throws -> ServerConfiguration {
        var configuration = ServerConfiguration()
        if self.tcp == "off" {
            configuration.tcpHost = nil
        } else {
            guard let colon = self.tcp.lastIndex(of: ":"), let port = Int(self.tcp[self.tcp.index(after: colon)...]) else {
                throw ValidationError("tcp must be host:port or off")
            }
            configuration.tcpHost = String(self.tcp[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
            configuration.tcpPort = port
        }
        if self.websocket != "off" {
            guard let colon = self.websocket.lastIndex(of: ":"),
                let port = Int(self.websocket[self.websocket.index(after: colon)...]), (0...65_535).contains(port)
            else {
                throw ValidationError("websocket must be host:port or off")
            }
            guard self.websocketPath.hasPrefix("/"), !self.websocketPath.contains("?") else {
                throw ValidationError("websocket-path must start with / (and hold no query), not \(self.websocketPath)")
            }
            let origins: WebSocketOrigins
            do {
                origins = try WebSocketOrigins.parse(self.websocketOrigins)
            } catch {
                throw ValidationError("websocket-origins: \(error.description)")
            }
            configuration.webSocket = ServerConfiguration.WebSocket(
                host: String(self.websocket[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]")),
                port: port, path: self.websocketPath, origins: origins)
        }
        switch (self.tlsCert, self.tlsKey) {
        case (let certificate?, let key?):
            guard configuration.tcpHost != nil || configuration.webSocket != nil else {
                throw ValidationError("--tls-cert and --tls-key are for the TCP and WebSocket listeners, and both are off")
            }
            configuration.tls = ServerConfiguration.TLS(certificateChainPath: certificate, privateKeyPath: key)
        case (nil, nil):
            break
        default:
            throw ValidationError("--tls-cert and --tls-key go together: give both or neither")
        }
        configuration.unixSocketPath = self.unixSocket == "off" ? nil : self.unixSocket
        guard let mode = UInt32(self.unixSocketMode, radix: 8), mode <= 0o777 else {
            throw ValidationError("unix-socket-mode must be an octal mode 0000-0777, such as 0600")
        }
        configuration.unixSocketMode = mode
        configuration.databasePath = self.database
        configuration.eventLoopThreads = self.threads
        do {
            configuration.tokenSecret = try TokenSecretLoader.load(of: self)
            configuration.tokenKeys = try TokenKeyLoader.load(of: self)
        } catch {
            throw ValidationError(error.description)
        }
        if let grants = self.defaultGrants {
            configuration.defaultGrants = try DefaultGrantsLoader.load(grants)
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

    /// Runs the gateway with these settings until SIGTERM or SIGINT.
    func serve() async throws {
        let configuration = try self.serverConfiguration()
        guard self.durability == "commit" || self.durability == "apply" else {
            throw ValidationError("durability must be commit or apply")
        }
        guard ["auto", "loop", "writer"].contains(self.commitOn) else {
            throw ValidationError("commit-on must be auto, loop or writer")
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
            throw ValidationError("log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        switch self.logFormat {
        case "text":
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
        case "json":
            LoggingSystem.bootstrap { label in JSONLogHandler(label: label, logLevel: level) }
        default:
            throw ValidationError("log-format must be text or json")
        }
        let logger = Logger(label: "switchboard")
        var applicationConfiguration = GatewayApplication.Configuration(server: configuration)
        var metricsPrometheus: PrometheusMetrics?
        switch self.inspector {
        case "on": applicationConfiguration.inspectorEnabled = true
        case "off": applicationConfiguration.inspectorEnabled = false
        default: throw ValidationError("inspector must be on or off")
        }
        if let port = self.metricsPort {
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
        if !configuration.requiresTokens {
            logger.warning("no token secret or key: open development mode, any user id is accepted (loopback only)")
        }
        var storeConfiguration = StoreConfiguration()
        storeConfiguration.durability = self.durability == "commit" ? .acknowledgeAfterCommit : .acknowledgeBeforeCommit
        // One loop: committing in place is cheapest (no hand-over). Several: a loop waiting for a sync would hold up
        // its connections while the others' writes queue behind it; the writer thread overlaps the sync with reading.
        let commitsOnLoop = self.commitOn == "loop" || (self.commitOn == "auto" && self.threads == 1)
        storeConfiguration.commitDriver = commitsOnLoop ? .caller : .writerQueue
        storeConfiguration.writeBehindDelayMs = UInt64(self.writeBehindMs)
        applicationConfiguration.store = storeConfiguration
        applicationConfiguration.presence = presenceConfiguration
        applicationConfiguration.unawaitedWriteDelayMs = self.unawaitedWriteDelayMs
        applicationConfiguration.providerTimeout = .milliseconds(Int64(self.providerTimeoutMs))
        applicationConfiguration.eventReplay = EventReplayLimits(
            capacity: self.eventReplayCapacity, maxAgeMs: Int64(self.eventReplaySeconds) * 1000)
        applicationConfiguration.broadcasts = BroadcastConfiguration(
            maxDataBytes: self.broadcastMaxBytes, ratePerSecond: self.broadcastRate, burst: self.broadcastBurst,
            rewindCount: self.broadcastRewindCount, rewindSeconds: self.broadcastRewindSeconds)
        var nodeID: String?
        var clusterEngine: PostgresCluster?
        if let url = self.cluster {
            let location: PostgresLocation
            do {
                location = try PostgresLocation(url: url)
            } catch {
                throw ValidationError("--cluster: \(error.description)")
            }
            var redis: RedisLocation?
            if let address = self.redis {
                do {
                    redis = try RedisLocation(address: address)
                } catch {
                    throw ValidationError("--redis: \(error.description)")
                }
            }
            let engine = PostgresCluster(location: location, redis: redis)
            nodeID = engine.nodeID
            clusterEngine = engine
            // A dead node's members must be gone from the others within the presence timeout: a node is seen dead
            // one heartbeat after its node timeout, so a short presence timeout shortens the node timeout too.
            let presenceBound = Duration.seconds(self.presenceTimeout) - engine.heartbeatInterval
            engine.nodeTimeout = min(engine.nodeTimeout, presenceBound)
            FencedExit.arm(engine.liveness, drainGrace: .milliseconds(self.shutdownGraceMs), logger: logger)
            applicationConfiguration.engines = .cluster(engine)
        } else if self.redis != nil {
            throw ValidationError("--redis needs --cluster: Redis relays a cluster's changes")
        }
        let webhooks = try self.webhookDispatcher(
            metricsFactory: metricsPrometheus?.factory, cluster: clusterEngine, logger: logger)
        applicationConfiguration.webhooks = webhooks
        let addOns: [any GatewayAddOn] = try self.httpAPI(webhooks: webhooks).map { [$0] } ?? []
        // SIGHUP's default action ends the process: ignored until the gateway runs, then it reloads.
        signal(SIGHUP, SIG_IGN)
        let startLine = StartLine(nodeID: nodeID)
        let advertised = clusterEngine
        let application = GatewayApplication(
            configuration: applicationConfiguration, addOns: addOns, metrics: metricsPrometheus, logger: logger,
            onServerRunning: { [self] running in
                SecondSignal.exitImmediately(logger: logger)
                startLine.log(
                    running, tls: configuration.tls != nil, tokens: configuration.requiresTokens, logger: logger)
                CredentialReload.install(gateway: running.gateway, settings: self, logger: logger)
                // The other nodes' `info` lists this node at the address its clients reach it (TCP, else WebSocket).
                if let address = running.addresses.tcp ?? running.addresses.webSocket, let port = address.port {
                    let host = address.ipAddress ?? "127.0.0.1"
                    advertised?.advertise(address: host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
                }
            })
        do {
            try await application.runService(gracefulShutdownSignals: [.sigterm, .sigint])
        } catch let error as DatabaseLockError {
            // The application logged it as critical ("…; refusing to start").
            throw ExitCode(StartFailure(error).exitStatus)
        } catch is NodeFenced {
            throw ExitCode(FencedExit.status)  // logged as critical when it fenced itself
        }
        logger.info("switchboard stopped")
    }
}

extension ServeSettings {
    /// The HTTP API these settings ask for (`api`, `api-key-file`), nil when it is off.
    ///
    /// - Throws: `ValidationError` for an address that is not host:port, or a key file that cannot be read or parsed.
    func httpAPI(webhooks: (any WebhookAdministration)? = nil) throws -> HTTPAPI? {
        guard self.api != "off" else {
            if self.apiKeyFile != nil { throw ValidationError("--api-key-file needs --api") }
            return nil
        }
        guard let colon = self.api.lastIndex(of: ":"), let port = Int(self.api[self.api.index(after: colon)...]),
            (0...65_535).contains(port)
        else {
            throw ValidationError("api must be host:port or off")
        }
        var keys = APIKeys.none
        if let path = self.apiKeyFile {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ValidationError("api-key-file: cannot read \(path)")
            }
            do {
                keys = try APIKeys(parsing: String(decoding: data, as: UTF8.self))
            } catch {
                throw ValidationError("api-key-file \(path): \(error.description)")
            }
            guard !keys.isEmpty else { throw ValidationError("api-key-file \(path) holds no key") }
        }
        let host = String(self.api[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        var api = HTTPAPI.Configuration(host: host, port: port, keys: keys)
        api.webhooks = webhooks
        return HTTPAPI(configuration: api)
    }

    /// The webhook dispatcher these settings ask for (`webhooks`), its outbox in the metadata file `<database>`, or, on a node
    /// of `cluster`, the cluster's shared outbox in PostgreSQL; nil without a webhooks file.
    ///
    /// - Throws: `ValidationError` for a file that cannot be read or is not a usable configuration, or an outbox that
    ///   cannot be opened.
    func webhookDispatcher(
        metricsFactory: (any MetricsFactory)?, cluster: PostgresCluster?, logger: Logger
    ) throws -> WebhookDispatcher? {
        guard let path = self.webhooks else { return nil }
        let configuration: WebhookConfiguration
        do {
            configuration = try WebhookConfiguration.load(path: path)
        } catch {
            throw ValidationError("webhooks: \(error.description)")
        }
        if let cluster {
            // One outbox for the cluster; each event written by the node that decided it, online states by the event
            // engine in the transaction that decides them. A claim's lease outlasts the longest request.
            let node = configuration.node ?? cluster.nodeID
            let leaseMs = Int64(configuration.endpoints.map(\.timeoutMs).max() ?? 10_000) + 5_000
            let outbox = cluster.webhookOutbox(leaseMs: leaseMs) { states in
                configuration.deliveries(for: states.compactMap(WebhookEvent.online), node: node)
            }
            return WebhookDispatcher(
                configuration: configuration, outbox: outbox, kindsWrittenByEngines: ["online"], node: node,
                metricsFactory: metricsFactory, logger: Logger(label: "switchboard.webhooks"))
        }
        // The outbox is in the metadata file, so storage and lock events are written in their changes' transactions;
        // an outbox file of an earlier version (`<database>.webhooks`) is moved into it.
        let outbox: WebhookOutbox
        do {
            outbox = try WebhookOutbox(path: self.database, importing: self.database + ".webhooks")
        } catch {
            throw ValidationError("webhooks: cannot open the outbox in \(self.database): \(error)")
        }
        return WebhookDispatcher(
            configuration: configuration, outbox: outbox, metricsFactory: metricsFactory,
            logger: Logger(label: "switchboard.webhooks"))
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

struct Token: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mints a login token (a JWT) with the gateway's secret (HS256): --token-secret-file or --token-secret, else SWITCHBOARD_TOKEN_SECRET_FILE or SWITCHBOARD_TOKEN_SECRET, else the configuration file's (--config or SWITCHBOARD_CONFIG); or with a private key (--private-key).",
        usage: "switchboard token --user <user> [--ttl <ttl> | --expires <time>] [--admin] [--grants <json>] [--jti <id>] [--kid <kid>] [--not-before <time>] (--token-secret-file <path> | --token-secret <secret> | --config <path> | --private-key <path>)",
        discussion: "The secret must be at least 32 bytes (a file's without the whitespace around it), as the gateway requires; --token-secret-file, --token-secret and --config are the gateway's options (switchboard --help). The token carries sub, exp, iat, and the other claims when given (Docs/tokens.md).")

    /// The claims and `--private-key`: the options `sbctl token mint` shares.
    @OptionGroup var claims: TokenClaimOptions

    /// The secret's options, `--token-secret-file`, `--token-secret` and `--config`, are the gateway's: the root
    /// command parses its serve options (``ServeOptions``) wherever they stand, after `token` too.
    @ParentCommand var gateway: SwitchboardCommand

    func run() async throws {
        print(try await self.claims.mint { try await self.secret() })
    }

    /// The gateway's token secret, from its options, environment or configuration file.
    private func secret() async throws -> [UInt8] {
        let environment = ProcessInfo.processInfo.environment
        var commandLine: [String: ConfigContent] = [:]
        let options = self.gateway.options
        if let secret = options.tokenSecret { commandLine["token-secret"] = .string(secret) }
        if let file = options.tokenSecretFile { commandLine["token-secret-file"] = .string(file) }
        let resolved: ServeSettings
        do {
            var file: ConfigFile?
            if let path = options.config ?? environment[ServeSettings.configFileVariable] {
                file = try await ConfigFile.load(path: path)
            }
            resolved = try ServeSettings.resolve(commandLine: commandLine, environment: environment, configFile: file)
        } catch {
            throw ValidationError(error.description)
        }
        do {
            guard let key = try TokenSecretLoader.load(of: resolved) else {
                throw ValidationError(
                    "no secret: give --token-secret, --token-secret-file, SWITCHBOARD_TOKEN_SECRET or a configuration file with one (or --private-key)")
            }
            return key
        } catch let error as SettingsError {
            // The gateway refuses this secret at start: a token signed with it would never log in.
            throw ValidationError(error.description)
        }
    }
}
