import Foundation
import SwitchboardServer
import SwitchboardStore

/// One URL of the application's backend that receives webhooks, and which events it wants (`Docs/webhooks.md`).
public struct WebhookEndpoint: Sendable, Hashable, Codable {
    /// A stable name (the outbox and dead letters name the endpoint by it).
    public var name: String
    /// Where events are POSTed (`http` or `https`).
    public var url: String
    /// The signing secrets, `whsec_<base64>`: every one signs each request (one `v1,` signature each), so a secret is
    /// rotated by listing the new one beside the old one until the receiver has switched.
    public var secrets: [String]
    /// Channel name patterns whose channel events are sent (`*` at the end matches any rest; `*` alone any channel).
    /// Events about users (online states, user metadata) are not filtered by channel.
    public var channels: [String]
    /// Event kinds or types wanted: `presence`, `online`, `storage`, `lock`, or a type such as `presence.join`.
    public var kinds: [String]
    /// Tries before an event goes to the dead letters.
    public var maxAttempts: Int
    /// The first retry's delay (ms); each later one doubles, up to ``maxBackoffMs``, with up to 20% jitter added.
    public var initialBackoffMs: Int
    /// The longest delay between tries (ms).
    public var maxBackoffMs: Int
    /// How long one request may take (ms) before it counts as failed.
    public var timeoutMs: Int

    /// Ten tries over about an hour by default: 1 s, 2 s, 4 s … capped at 20 minutes.
    public init(
        name: String, url: String, secrets: [String], channels: [String] = ["*"],
        kinds: [String] = ["presence", "online", "storage", "lock"], maxAttempts: Int = 10,
        initialBackoffMs: Int = 1_000, maxBackoffMs: Int = 1_200_000, timeoutMs: Int = 10_000
    ) {
        self.name = name
        self.url = url
        self.secrets = secrets
        self.channels = channels
        self.kinds = kinds
        self.maxAttempts = maxAttempts
        self.initialBackoffMs = initialBackoffMs
        self.maxBackoffMs = maxBackoffMs
        self.timeoutMs = timeoutMs
    }

    private enum CodingKeys: String, CodingKey {
        case name, url, secrets, channels, kinds, maxAttempts, initialBackoffMs, maxBackoffMs, timeoutMs
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = WebhookEndpoint(name: "", url: "", secrets: [])
        self.name = try c.decode(String.self, forKey: .name)
        self.url = try c.decode(String.self, forKey: .url)
        self.secrets = try c.decode([String].self, forKey: .secrets)
        self.channels = try c.decodeIfPresent([String].self, forKey: .channels) ?? defaults.channels
        self.kinds = try c.decodeIfPresent([String].self, forKey: .kinds) ?? defaults.kinds
        self.maxAttempts = try c.decodeIfPresent(Int.self, forKey: .maxAttempts) ?? defaults.maxAttempts
        self.initialBackoffMs = try c.decodeIfPresent(Int.self, forKey: .initialBackoffMs) ?? defaults.initialBackoffMs
        self.maxBackoffMs = try c.decodeIfPresent(Int.self, forKey: .maxBackoffMs) ?? defaults.maxBackoffMs
        self.timeoutMs = try c.decodeIfPresent(Int.self, forKey: .timeoutMs) ?? defaults.timeoutMs
    }

    /// Whether this endpoint wants `event`.
    public func wants(_ event: WebhookEvent) -> Bool {
        let kind = event.kind
        guard self.kinds.contains(where: { $0 == event.type || $0 == kind }) else { return false }
        guard let channel = event.channel else { return true }
        return self.channels.contains { Self.matches(channel.name, pattern: $0) }
    }

    static func matches(_ name: String, pattern: String) -> Bool {
        if pattern.hasSuffix("*") { return name.hasPrefix(pattern.dropLast()) }
        return name == pattern
    }

    /// The delay before try `attempt + 1` after `attempt` failed tries (ms), without jitter.
    public func backoffMs(afterAttempts attempts: Int) -> Int {
        let exponent = min(max(attempts - 1, 0), 30)
        let base = self.initialBackoffMs.multipliedReportingOverflow(by: 1 << exponent)
        return base.overflow ? self.maxBackoffMs : min(base.partialValue, self.maxBackoffMs)
    }

    /// Problems that make the endpoint unusable, in words (empty: none).
    public var problems: [String] {
        var problems: [String] = []
        if self.name.isEmpty { problems.append("an endpoint needs a name") }
        if !(self.url.hasPrefix("http://") || self.url.hasPrefix("https://")) {
            problems.append("endpoint \(self.name): url must be http:// or https://")
        }
        if self.secrets.isEmpty { problems.append("endpoint \(self.name): at least one secret (whsec_<base64>)") }
        for secret in self.secrets where WebhookSigner.key(fromSecret: secret) == nil {
            problems.append("endpoint \(self.name): a secret is not whsec_<base64>")
        }
        if self.maxAttempts < 1 { problems.append("endpoint \(self.name): maxAttempts must be at least 1") }
        if self.initialBackoffMs < 1 || self.maxBackoffMs < self.initialBackoffMs {
            problems.append("endpoint \(self.name): 1 <= initialBackoffMs <= maxBackoffMs")
        }
        if self.timeoutMs < 1 { problems.append("endpoint \(self.name): timeoutMs must be positive") }
        return problems
    }
}

/// The webhooks configuration file (`--webhooks FILE`): `{"node": "...", "endpoints": [...]}`.
public struct WebhookConfiguration: Sendable, Hashable, Codable {
    /// The endpoints.
    public var endpoints: [WebhookEndpoint]
    /// The name of the node sending (the payload's `node`); the host name when absent.
    public var node: String?

    /// A configuration of `endpoints`.
    public init(endpoints: [WebhookEndpoint], node: String? = nil) {
        self.endpoints = endpoints
        self.node = node
    }

    /// Reads and checks the file at `path`.
    /// - Throws: ``WebhookConfigurationError`` when it cannot be read, is not the format, or an endpoint is unusable.
    public static func load(path: String) throws(WebhookConfigurationError) -> WebhookConfiguration {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw WebhookConfigurationError(description: "cannot read webhooks file \(path): \(error.localizedDescription)")
        }
        return try Self.parse(data, source: path)
    }

    /// Parses and checks a configuration.
    /// - Throws: ``WebhookConfigurationError``.
    public static func parse(_ data: Data, source: String = "webhooks") throws(WebhookConfigurationError) -> WebhookConfiguration {
        let configuration: WebhookConfiguration
        do {
            configuration = try JSONDecoder().decode(WebhookConfiguration.self, from: data)
        } catch {
            throw WebhookConfigurationError(description: "\(source) is not a webhooks configuration: \(error)")
        }
        var problems = configuration.endpoints.flatMap(\.problems)
        let names = configuration.endpoints.map(\.name)
        if Set(names).count != names.count { problems.append("endpoint names must be unique") }
        if !problems.isEmpty {
            throw WebhookConfigurationError(description: "\(source): " + problems.joined(separator: "; "))
        }
        return configuration
    }
}

/// A webhooks configuration that cannot be used.
public struct WebhookConfigurationError: Error, Sendable, CustomStringConvertible {
    /// What is wrong.
    public var description: String
}
