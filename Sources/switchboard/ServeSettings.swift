import Configuration
import Foundation
import SwitchboardServer
import SwitchboardStore

/// The settings of `switchboard serve`, each named by its long option: `--max-connections` is the key
/// `max-connections` in a configuration file and the environment variable `SWITCHBOARD_MAX_CONNECTIONS`.
///
/// ``resolve(commandLine:environment:configFile:)`` reads every key with a swift-configuration `ConfigReader`
/// whose providers are, in precedence order: the command line, the environment, the configuration file; a key
/// none of them has keeps its default.
struct ServeSettings: Equatable, Sendable {
    /// Where the login tokens' HMAC secret comes from.
    enum TokenSecret: Equatable, Sendable {
        /// The secret itself (`token-secret`).
        case inline(String)
        /// A file holding it (`token-secret-file`).
        case file(String)
    }

    var tcp = "127.0.0.1:7400"
    /// The WebSocket listener, `HOST:PORT` or `off`.
    var websocket = "off"
    /// The path WebSocket upgrades are accepted on.
    var websocketPath = "/"
    /// The browser origins the WebSocket listener accepts: `*`, or a comma-separated list (empty: none).
    var websocketOrigins = ""
    /// The HTTP API listener (Docs/http-api.md), `HOST:PORT` or `off`.
    var api = "off"
    /// The HTTP API's keys, one `NAME SECRET` a line (nil: admin tokens only).
    var apiKeyFile: String?
    /// The webhooks configuration file (Docs/webhooks.md; nil: no webhooks).
    var webhooks: String?
    var unixSocket = "./switchboard.sock"
    var unixSocketMode = "0600"
    var database = "./switchboard.sqlite"
    var durability = "commit"
    var commitOn = "auto"
    var writeBehindMs = 5
    var unawaitedWriteDelayMs = GroupCommitDefaults.unawaitedWriteDelayMs
    var threads = 1
    /// Nil: open development mode.
    var tokenSecret: TokenSecret?
    /// Where ``tokenSecret`` was given, as messages name it (`--token-secret`, `SWITCHBOARD_TOKEN_SECRET_FILE`,
    /// `config file PATH: "token-secret"`); nil without a secret.
    var tokenSecretSource: String?
    /// The grants of tokens without a `grants` claim: JSON, or `@PATH` of a file holding it (nil: own data only).
    var defaultGrants: String?
    /// `KID=PATH` pairs separated by commas (`--token-key`, repeatable on the command line; ``TokenKeyLoader``).
    var tokenKeys: String?
    /// A JWKS file of token keys (`--jwks-file`).
    var jwksFile: String?
    var maxConnections = 100_000
    var maxFrameSize = 1 << 20
    var maxInflatedSize = 1 << 20
    var rateLimit = 20_000
    var rateBurst = 40_000
    var maxSubscriptions = 10_000
    var maxInflight = 128
    var outboundHighWater = 1 << 20
    var outboundHardCap = 8 << 20
    var heartbeatMs = 15_000
    var heartbeatMisses = 3
    var handshakeTimeoutMs = 10_000
    var compressionThreshold = 512
    var shutdownGraceMs = 10_000
    var presenceTimeout = 30
    var presenceIntervalThreshold = 50
    var presenceIntervalMs = 1_000
    var providerTimeoutMs = 5_000
    var eventReplayCapacity = EventReplayLimits.defaultCapacity
    var eventReplaySeconds = Int(EventReplayLimits.defaultMaxAgeMs / 1000)
    var broadcastMaxBytes = BroadcastConfiguration().maxDataBytes
    var broadcastRate = BroadcastConfiguration().ratePerSecond
    var broadcastBurst = BroadcastConfiguration().burst
    var broadcastRewindCount = BroadcastConfiguration().rewindCount
    var broadcastRewindSeconds = BroadcastConfiguration().rewindSeconds
    /// Nil: no metrics endpoint.
    var metricsPort: Int?
    /// The address the metrics endpoint binds.
    var metricsHost = "127.0.0.1"
    /// `on`: the metrics endpoint also serves the inspector; `off`: it does not.
    var inspector = "on"
    var logLevel = "info"
    /// `text` (swift-log's stream format) or `json` (one JSON object per line).
    var logFormat = "text"
    /// The PostgreSQL URL of the cluster this gateway is a node of (nil: a single gateway).
    var cluster: String?
    /// The Redis server (`HOST:PORT`) of the cluster, with ``cluster`` (nil: PostgreSQL alone).
    var redis: String?
    /// TLS for the TCP listener: the certificate chain and its key (PEM files), both or neither.
    var tlsCert: String?
    var tlsKey: String?

    /// A setting's key and where its value goes.
    enum Key: Sendable {
        case string(String, any WritableKeyPath<ServeSettings, String> & Sendable)
        /// A number and the values it may take (Docs/configuration.md lists the same ranges).
        case integer(String, any WritableKeyPath<ServeSettings, Int> & Sendable, ClosedRange<Int>)
        /// A number that may be absent, and the values it may take.
        case optionalInteger(String, any WritableKeyPath<ServeSettings, Int?> & Sendable, ClosedRange<Int>)
        /// A string that may be absent and may hold a password (never logged).
        case optionalSecretString(String, any WritableKeyPath<ServeSettings, String?> & Sendable)
        /// A string that may be absent.
        case optionalString(String, any WritableKeyPath<ServeSettings, String?> & Sendable)
        /// `token-secret` or `token-secret-file`: resolved together (``TokenSecret``).
        case secret(String)

        var name: String {
            switch self {
            case .string(let name, _), .integer(let name, _, _), .optionalInteger(let name, _, _),
                .optionalSecretString(let name, _), .optionalString(let name, _), .secret(let name):
                return name
            }
        }

        /// The type its values must have.
        var type: ConfigType {
            switch self {
            case .string, .optionalSecretString, .optionalString, .secret: return .string
            case .integer, .optionalInteger: return .int
            }
        }

        /// The values a number may take; nil for a string.
        var range: ClosedRange<Int>? {
            switch self {
            case .integer(_, _, let range), .optionalInteger(_, _, let range): return range
            default: return nil
            }
        }
    }

    /// Every key, in the order of `switchboard serve --help`, with the range of each number (the ranges of the
    /// option table in Docs/configuration.md).
    static let keys: [Key] = [
        .string("tcp", \.tcp),
        .optionalString("tls-cert", \.tlsCert),
        .optionalString("tls-key", \.tlsKey),
        .string("websocket", \.websocket),
        .string("websocket-path", \.websocketPath),
        .string("websocket-origins", \.websocketOrigins),
        .string("api", \.api),
        .optionalString("api-key-file", \.apiKeyFile),
        .optionalString("webhooks", \.webhooks),
        .string("unix-socket", \.unixSocket),
        .string("unix-socket-mode", \.unixSocketMode),
        .string("database", \.database),
        .string("durability", \.durability),
        .string("commit-on", \.commitOn),
        .integer("write-behind-ms", \.writeBehindMs, 0...1_000),
        .integer("unawaited-write-delay-ms", \.unawaitedWriteDelayMs, 0...1_000),
        .integer("threads", \.threads, 1...256),
        .secret("token-secret"),
        .secret("token-secret-file"),
        .optionalString("default-grants", \.defaultGrants),
        .optionalString("token-key", \.tokenKeys),
        .optionalString("jwks-file", \.jwksFile),
        .integer("max-connections", \.maxConnections, 1...1_000_000),
        .integer("max-frame-size", \.maxFrameSize, 16_384...268_435_455),
        .integer("max-inflated-size", \.maxInflatedSize, 16_384...268_435_455),
        .integer("rate-limit", \.rateLimit, 0...10_000_000),
        .integer("rate-burst", \.rateBurst, 1...100_000_000),
        .integer("max-subscriptions", \.maxSubscriptions, 1...1_000_000),
        .integer("max-inflight", \.maxInflight, 1...100_000),
        .integer("outbound-high-water", \.outboundHighWater, 16_384...1 << 30),
        .integer("outbound-hard-cap", \.outboundHardCap, 16_384...1 << 32),
        .integer("heartbeat-ms", \.heartbeatMs, 1_000...300_000),
        .integer("heartbeat-misses", \.heartbeatMisses, 1...100),
        .integer("handshake-timeout-ms", \.handshakeTimeoutMs, 100...300_000),
        .integer("compression-threshold", \.compressionThreshold, 0...268_435_455),
        .integer("shutdown-grace-ms", \.shutdownGraceMs, 0...3_600_000),
        .integer("presence-timeout", \.presenceTimeout, 5...300),
        .integer("presence-interval-threshold", \.presenceIntervalThreshold, 8...128),
        .integer("presence-interval-ms", \.presenceIntervalMs, 100...60_000),
        .integer("provider-timeout-ms", \.providerTimeoutMs, 100...600_000),
        .integer("event-replay-capacity", \.eventReplayCapacity, 0...10_000_000),
        .integer("event-replay-seconds", \.eventReplaySeconds, 0...3_600),
        .integer("broadcast-max-bytes", \.broadcastMaxBytes, 1...BroadcastConfiguration.maxDataBytesLimit),
        .integer("broadcast-rate", \.broadcastRate, 1...100_000),
        .integer("broadcast-burst", \.broadcastBurst, 1...1_000_000),
        .integer("broadcast-rewind-count", \.broadcastRewindCount, 0...BroadcastConfiguration.maxRewindCountLimit),
        .integer("broadcast-rewind-seconds", \.broadcastRewindSeconds, 1...BroadcastConfiguration.maxRewindSecondsLimit),
        .optionalInteger("metrics-port", \.metricsPort, 0...65_535),
        .string("metrics-host", \.metricsHost),
        .string("inspector", \.inspector),
        .string("log-level", \.logLevel),
        .string("log-format", \.logFormat),
        .optionalSecretString("cluster", \.cluster),
        .optionalString("redis", \.redis),
    ]

    /// The environment variable that holds `key`: `SWITCHBOARD_` and the key in upper case, dashes as underscores.
    static func environmentVariable(for key: String) -> String {
        "SWITCHBOARD_" + key.uppercased().replacingOccurrences(of: "-", with: "_")
    }

    /// The environment variable that names the configuration file when `--config` does not.
    static let configFileVariable = "SWITCHBOARD_CONFIG"

    /// Resolves every setting: the command line wins over the environment, which wins over the configuration
    /// file, which wins over the defaults. The token secret is one setting: the first of these sources that has
    /// `token-secret-file` or `token-secret` gives it (the file when it has both).
    ///
    /// - Parameters:
    ///   - commandLine: the options given on the command line, by key.
    ///   - environment: the process environment; only `SWITCHBOARD_<KEY>` variables are read.
    ///   - configFile: the configuration file, if there is one.
    /// - Throws: ``SettingsError`` naming the key and its source (`--max-connections`,
    ///   `SWITCHBOARD_MAX_CONNECTIONS`, `config file PATH: "max-connections"`) for a value of the wrong type or a
    ///   number out of its key's range (``Key/range``), and for an outbound hard cap below the high-water mark.
    static func resolve(
        commandLine: [String: ConfigContent], environment: [String: String], configFile: ConfigFile?
    ) throws(SettingsError) -> ServeSettings {
        let secretKeys = Set(Self.keys.compactMap { key -> String? in
            if case .secret(let name) = key { return name }
            return nil
        })
        var commandLineValues: [AbsoluteConfigKey: ConfigValue] = [:]
        for (name, content) in commandLine {
            commandLineValues[AbsoluteConfigKey([name])] = ConfigValue(content, isSecret: secretKeys.contains(name))
        }
        let layers: [(name: (String) -> String, provider: any ConfigProvider)] =
            [
                ({ "--\($0)" }, InMemoryProvider(name: "command line", values: commandLineValues)),
                (
                    Self.environmentVariable(for:),
                    EnvironmentVariablesProvider(
                        environmentVariables: environment.filter { $0.key.hasPrefix("SWITCHBOARD_") },
                        secretsSpecifier: .specific(Set(secretKeys.map(Self.environmentVariable(for:)))))
                        .prefixKeys(with: ConfigKey(["switchboard"]))
                ),
            ] + (configFile.map { file in [({ "config file \(file.path): \"\($0)\"" }, file.provider)] } ?? [])

        // Every value must have its key's type, in every source, even where a stronger source hides it.
        for (name, provider) in layers {
            for key in Self.keys {
                do {
                    _ = try provider.value(forKey: AbsoluteConfigKey([key.name]), type: key.type)
                } catch {
                    throw SettingsError.wrongType(setting: name(key.name), expected: key.type)
                }
            }
        }

        let reader = ConfigReader(providers: layers.map(\.provider))
        var settings = ServeSettings()
        for key in Self.keys {
            let configKey = ConfigKey([key.name])
            switch key {
            case .string(_, let path):
                settings[keyPath: path] = reader.string(forKey: configKey, default: settings[keyPath: path])
            case .integer(_, let path, _):
                settings[keyPath: path] = reader.int(forKey: configKey, default: settings[keyPath: path])
            case .optionalInteger(_, let path, _):
                settings[keyPath: path] = reader.int(forKey: configKey) ?? settings[keyPath: path]
            case .optionalSecretString(_, let path):
                settings[keyPath: path] = reader.string(forKey: configKey, isSecret: true) ?? settings[keyPath: path]
            case .optionalString(_, let path):
                settings[keyPath: path] = reader.string(forKey: configKey) ?? settings[keyPath: path]
            case .secret:
                break
            }
        }
        // The source that gives a key: the strongest one that has it.
        func source(of key: String) -> String {
            for (name, provider) in layers {
                if let result = try? provider.value(forKey: AbsoluteConfigKey([key]), type: .int), result.value != nil {
                    return name(key)
                }
            }
            return "--\(key)"
        }
        // Every number in its range, named where it was given (a default is always in range).
        for key in Self.keys {
            guard let range = key.range else { continue }
            let value: Int?
            switch key {
            case .integer(_, let path, _): value = settings[keyPath: path]
            case .optionalInteger(_, let path, _): value = settings[keyPath: path]
            default: value = nil
            }
            if let value, !range.contains(value) {
                throw SettingsError.outOfRange(setting: source(of: key.name), value: value, range: range)
            }
        }
        // Reading stops above the high-water mark; a hard cap below it would cut a connection before it is paused.
        guard settings.outboundHardCap >= settings.outboundHighWater else {
            throw SettingsError.conflict(
                "\(source(of: "outbound-hard-cap")) (\(settings.outboundHardCap)) must be at least "
                    + "\(source(of: "outbound-high-water")) (\(settings.outboundHighWater))")
        }
        for (name, provider) in layers {
            let source = ConfigReader(provider: provider)
            if let file = source.string(forKey: ConfigKey(["token-secret-file"])) {
                settings.tokenSecret = .file(file)
                settings.tokenSecretSource = name("token-secret-file")
                break
            }
            if let secret = source.string(forKey: ConfigKey(["token-secret"]), isSecret: true) {
                settings.tokenSecret = .inline(secret)
                settings.tokenSecretSource = name("token-secret")
                break
            }
        }
        return settings
    }
}

/// A configuration file of `switchboard serve`: a JSON object whose keys are the long options' names.
struct ConfigFile: Sendable {
    /// Where it was read from.
    let path: String
    /// Its values.
    let provider: FileProvider<JSONSnapshot>

    /// Reads and checks the file at `path`.
    ///
    /// - Throws: ``SettingsError`` when the file cannot be read, is not a JSON object, or has a key that is not a
    ///   setting (a misspelt one would otherwise be ignored without a word).
    static func load(path: String) async throws(SettingsError) -> ConfigFile {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw SettingsError.unreadableFile(path: path, reason: "\(error.localizedDescription)")
        }
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: data)
        } catch {
            throw SettingsError.unreadableFile(path: path, reason: "not valid JSON")
        }
        guard let values = object as? [String: Any] else {
            throw SettingsError.unreadableFile(path: path, reason: "its top level is not a JSON object")
        }
        let known = Dictionary(uniqueKeysWithValues: ServeSettings.keys.map { ($0.name, $0) })
        for (name, value) in values.sorted(by: { $0.key < $1.key }) {
            guard let key = known[name] else {
                throw SettingsError.unknownKey(key: name, path: path)
            }
            // Only strings and numbers are values; the provider below tells which of the two a key takes.
            if Self.isBoolean(value) || !(value is String || value is NSNumber) {
                throw SettingsError.wrongType(setting: "config file \(path): \"\(name)\"", expected: key.type)
            }
        }
        do {
            let location = InMemoryProvider(values: ["filePath": ConfigValue(.string(path), isSecret: false)])
            let provider = try await FileProvider<JSONSnapshot>(
                parsingOptions: JSONSnapshot.ParsingOptions(secretsSpecifier: .specific(["token-secret"])),
                config: ConfigReader(provider: location))
            return ConfigFile(path: path, provider: provider)
        } catch {
            throw SettingsError.unreadableFile(path: path, reason: "\(error)")
        }
    }

    /// Whether a value from `JSONSerialization` is `true` or `false`. Foundation hands booleans out as numbers
    /// (on Linux `1 is Bool` holds too); their Objective-C type, `c`, tells them apart.
    private static func isBoolean(_ value: Any) -> Bool {
        guard let number = value as? NSNumber else { return false }
        return String(cString: number.objCType) == "c"
    }
}

/// Why the settings could not be read; its description names the key and says where the value came from.
enum SettingsError: Error, Equatable, CustomStringConvertible {
    /// A key in the configuration file that is not a setting.
    case unknownKey(key: String, path: String)
    /// A value that is not of its key's type; `setting` names the key and its source.
    case wrongType(setting: String, expected: ConfigType)
    /// The configuration file cannot be read or is not a JSON object.
    case unreadableFile(path: String, reason: String)
    /// A number outside the range its key allows; `setting` names the key and its source.
    case outOfRange(setting: String, value: Int, range: ClosedRange<Int>)
    /// Settings that cannot go together, as a sentence naming them.
    case conflict(String)
    /// A token secret that cannot be used (``TokenSecretLoader``), as a sentence naming its source.
    case unusableTokenSecret(String)
    /// A token key or JWKS that cannot be used (``TokenKeyLoader``), as a sentence naming its file.
    case unusableTokenKey(String)

    var description: String {
        switch self {
        case .unknownKey(let key, let path):
            return "config file \(path): unknown key \"\(key)\" (the keys are the long options of switchboard serve)"
        case .wrongType(let setting, let expected):
            return "\(setting) must be \(expected == .int ? "an integer" : "a string")"
        case .unreadableFile(let path, let reason):
            return "config file \(path): \(reason)"
        case .outOfRange(let setting, let value, let range):
            return "\(setting) must be \(range.lowerBound)-\(range.upperBound), not \(value)"
        case .conflict(let sentence), .unusableTokenSecret(let sentence), .unusableTokenKey(let sentence):
            return sentence
        }
    }
}
