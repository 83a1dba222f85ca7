import ArgumentParser
import NIOCore
import SwitchboardClient
import SwitchboardWire

/// `sbctl ping`: the round trip time to the gateway, PING to PONG on the logged-in connection.
public struct PingCommand: SessionCommand {
    public static let configuration = CommandConfiguration(
        commandName: "ping",
        abstract: "Measure the round trip time to the gateway (PING, PONG).",
        discussion: """
            Prints one line per PONG ('pong seq=1 time=0.123 ms'), and with --count above 1 a summary \
            ('3 pings: min 0.101 ms, avg 0.120 ms, max 0.150 ms'). A PONG that does not come within --timeout \
            exits 75.
            """)

    @Option(name: .shortAndLong, help: ArgumentHelp("Pings to send.", valueName: "n")) var count = 1
    @Option(help: ArgumentHelp("Seconds between pings.", valueName: "seconds")) var interval = 1.0
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        guard (1...10_000).contains(self.count) else { throw ValidationError("--count must be 1-10000") }
        guard self.interval >= 0 && self.interval <= 3600 else { throw ValidationError("--interval must be 0-3600") }
    }

    public func run(in session: CommandSession) async -> ExitStatus {
        var times: [Duration] = []
        for sequence in 1...self.count {
            if sequence > 1 {
                do {
                    try await Task.sleep(for: .milliseconds(Int64(self.interval * 1000)))
                } catch {
                    break
                }
            }
            let start = ContinuousClock.now
            do {
                try await session.connection.ping(nonce: UInt64(sequence), timeout: session.timeout ?? .seconds(30))
            } catch let error as SwitchboardClientError {
                session.report(.fromClientError(error, op: nil))
                return CommandFailure.fromClientError(error, op: nil).status
            } catch {
                session.report(CommandFailure(status: .software, name: "software", message: "\(error)"))
                return .software
            }
            let time = ContinuousClock.now - start
            times.append(time)
            session.console.out(Self.pongLine(sequence: sequence, time: time, format: session.format))
        }
        if times.count > 1 { session.console.out(Self.summaryLine(times, format: session.format)) }
        return .success
    }

    /// `pong seq=1 time=0.123 ms`, or `{"kind":"pong","seq":1,"timeMs":0.123}`.
    static func pongLine(sequence: Int, time: Duration, format: OutputFormat) -> String {
        switch format {
        case .text:
            return "pong seq=\(sequence) time=\(Self.milliseconds(time)) ms"
        case .json:
            return JSONValue.object([
                ("kind", .string("pong")), ("seq", .uint(UInt64(sequence))),
                ("timeMs", .number(Self.milliseconds(time))),
            ]).description
        }
    }

    /// `3 pings: min 0.101 ms, avg 0.120 ms, max 0.150 ms`, or the same as JSON (`"kind": "pingSummary"`).
    static func summaryLine(_ times: [Duration], format: OutputFormat) -> String {
        let minimum = times.min() ?? .zero
        let maximum = times.max() ?? .zero
        let average = times.reduce(Duration.zero, +) / times.count
        switch format {
        case .text:
            return "\(times.count) pings: min \(Self.milliseconds(minimum)) ms, avg \(Self.milliseconds(average)) ms, "
                + "max \(Self.milliseconds(maximum)) ms"
        case .json:
            return JSONValue.object([
                ("kind", .string("pingSummary")), ("count", .uint(UInt64(times.count))),
                ("minMs", .number(Self.milliseconds(minimum))), ("avgMs", .number(Self.milliseconds(average))),
                ("maxMs", .number(Self.milliseconds(maximum))),
            ]).description
        }
    }

    /// Milliseconds with three decimals: `0.123`, `12.500`.
    static func milliseconds(_ time: Duration) -> String {
        let microseconds = time.components.seconds * 1_000_000 + time.components.attoseconds / 1_000_000_000_000
        let fraction = String(microseconds % 1000)
        return "\(microseconds / 1000)." + String(repeating: "0", count: 3 - fraction.count) + fraction
    }
}

/// `sbctl info`: what the gateway said in its WELCOME, and where it is.
public struct InfoCommand: SessionCommand {
    public static let configuration = CommandConfiguration(
        commandName: "info",
        abstract: "Show the gateway and session (endpoint, version, features, limits) and, to admins, its statistics.",
        discussion: """
            The gateway and session come from the WELCOME the gateway sent at login (Protocol/SPEC.md §5.1). An admin \
            session also asks the gateway for its statistics (the info operation): uptime, connections, sessions, \
            users online, channels and memberships, subscriptions, metadata sets and items, writes per second, the \
            write-back queue, and on a cluster every node with its heartbeat and change feed lag. With --json: \
            {"kind": "info", "endpoint": ..., "welcome": {...}, "stats": {...}} with the WELCOME and the info \
            answer in canonical JSON ("stats" only for admins).
            """)

    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func run(in session: CommandSession) async -> ExitStatus {
        let endpoint = session.endpoint.map(\.description)
        let welcome = session.connection.welcome
        // Statistics are for admins: others get the session facts alone, without a request that would be refused.
        var stats: InfoResponse?
        if welcome.isAdmin {
            switch await session.send(.info(EmptyBody())) {
            case .success(.info(let body)): stats = body
            case .success: break
            case .failure(let failure):
                session.report(failure)
                return failure.status
            }
        }
        switch session.format {
        case .text:
            for line in Self.lines(welcome: welcome, endpoint: endpoint) { session.console.out(line) }
            if let stats {
                session.console.out("statistics")
                for line in ResponseText.info(stats) { session.console.out("  " + line) }
            }
        case .json:
            var members: [(key: String, value: JSONValue)] = [("kind", .string("info"))]
            if let endpoint { members.append(("endpoint", .string(endpoint))) }
            members.append(("welcome", welcome.jsonValue))
            if let stats { members.append(("stats", stats.jsonValue)) }
            session.console.out(JSONValue.object(members).description)
        }
        return .success
    }

    /// The text lines for a WELCOME from `endpoint`: one fact per line.
    public static func lines(welcome: Welcome, endpoint: String?) -> [String] {
        var lines: [String] = []
        if let endpoint { lines.append("endpoint \(endpoint)") }
        // The server name is `name/version` (switchboard/0.9.0).
        let nameAndVersion = welcome.serverName.split(separator: "/", maxSplits: 1).map(String.init)
        lines.append("server \(TextQuoting.quoted(nameAndVersion.first ?? welcome.serverName))")
        if nameAndVersion.count == 2 { lines.append("version \(TextQuoting.quoted(nameAndVersion[1]))") }
        lines.append("protocol \(welcome.protocolVersion)")
        lines.append("session \(TextQuoting.quoted(welcome.sessionId))")
        lines.append("user \(TextQuoting.quoted(welcome.userId))\(welcome.isAdmin ? " admin" : "")")
        lines.append("features " + (welcome.features.isEmpty ? "none" : welcome.features.joined(separator: " ")))
        lines.append("maxFrameSize \(welcome.maxFrameSize)")
        lines.append("maxInflatedSize \(welcome.maxInflatedSize)")
        lines.append("maxInflight \(welcome.maxInflight)")
        let rate = welcome.requestsPerSecond == 0 ? "unlimited" : "\(welcome.requestsPerSecond)"
        lines.append("requestsPerSecond \(rate)")
        lines.append("heartbeat \(welcome.heartbeatMs) ms, \(welcome.heartbeatMisses) misses")
        lines.append("compressThreshold \(welcome.compressThreshold)")
        lines.append("serverTime \(TextQuoting.instant(milliseconds: welcome.serverTimeMs))")
        return lines
    }
}
