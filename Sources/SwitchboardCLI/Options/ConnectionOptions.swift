import ArgumentParser
import NIOCore
import SwitchboardClient
import SwitchboardWire

/// Options every sbctl command takes: where the gateway is, who logs in, how long to wait, how to print.
///
/// Unset options come from the environment: `SWITCHBOARD_ADDRESS`, `SWITCHBOARD_USER`, `SWITCHBOARD_TOKEN`,
/// `SWITCHBOARD_DEVICE`, `SWITCHBOARD_TIMEOUT`.
public struct ConnectionOptions: ParsableArguments, Sendable {
    @Option(name: .customLong("tcp"), help: ArgumentHelp("Gateway TCP address.", valueName: "host:port"))
    public var tcp: String?

    @Option(name: .customLong("unix"), help: ArgumentHelp("Gateway Unix socket path.", valueName: "path"))
    public var unix: String?

    @Option(help: "User to log in as (open mode), or to check against the token. Default: $SWITCHBOARD_USER, else the login name.")
    public var user: String?

    @Option(help: "Login token (a JWT: eyJ...). Default: $SWITCHBOARD_TOKEN.")
    public var token: String?

    @Option(help: "This device's id. Default: $SWITCHBOARD_DEVICE.")
    public var device: String?

    @Option(help: ArgumentHelp("Seconds to wait for connecting and for each answer (default 30).", valueName: "seconds"))
    public var timeout: Double?

    @Flag(help: "Connect to the TCP address with TLS, trusting the system's certificate authorities.")
    public var tls = false

    @Option(
        name: .customLong("tls-ca"),
        help: ArgumentHelp("Connect with TLS, trusting the CA certificates in this PEM file (implies --tls).", valueName: "path"))
    public var tlsCA: String?

    @Option(
        name: .customLong("tls-server-name"),
        help: ArgumentHelp(
            "The name the gateway's certificate must be valid for (default: the --tcp host; implies --tls).",
            valueName: "name"))
    public var tlsServerName: String?

    @Flag(
        name: .customLong("tls-insecure"),
        help: "Connect with TLS but accept any certificate (no verification: tests and development only; implies --tls).")
    public var tlsInsecure = false

    @Flag(help: "Print JSON (the spec's canonical rendering) instead of text.")
    public var json = false

    public init() {}

    public func validate() throws {
        if self.tcp != nil, self.unix != nil { throw ValidationError("give either --tcp or --unix, not both") }
        if let tcp = self.tcp, GatewayAddress.parseTCP(tcp) == nil {
            throw ValidationError("--tcp must be host:port, found '\(tcp)'")
        }
        if let unix = self.unix, unix.isEmpty { throw ValidationError("--unix needs a path") }
        if self.usesTLS, self.unix != nil { throw ValidationError("TLS is for a TCP gateway (--tcp), not --unix") }
        if self.tlsInsecure, self.tlsCA != nil { throw ValidationError("give --tls-ca or --tls-insecure, not both") }
        if let name = self.tlsServerName, name.isEmpty { throw ValidationError("--tls-server-name needs a name") }
        if let timeout = self.timeout, !(timeout > 0 && timeout <= 86_400) {
            throw ValidationError("--timeout must be between 0 and 86400 seconds")
        }
    }

    /// Whether the command line named a gateway or a login (not allowed inside the shell, which has one connection).
    public var namesConnection: Bool {
        self.tcp != nil || self.unix != nil || self.user != nil || self.token != nil || self.device != nil
            || self.usesTLS
    }

    /// Whether any TLS option was given.
    public var usesTLS: Bool {
        self.tls || self.tlsCA != nil || self.tlsServerName != nil || self.tlsInsecure
    }

    /// The TLS settings the options ask for; nil without TLS options.
    public var tlsSettings: ClientConfiguration.TLS? {
        guard self.usesTLS else { return nil }
        return ClientConfiguration.TLS(
            trustRoots: self.tlsCA.map { .pemFile($0) } ?? .system, serverName: self.tlsServerName,
            verification: self.tlsInsecure ? .insecureNoVerification : .full)
    }

    /// The output format asked for.
    public var format: OutputFormat { self.json ? .json : .text }

    /// The gateway address: `--tcp`, `--unix`, `SWITCHBOARD_ADDRESS`, else `./switchboard.sock` when that file
    /// exists, else TCP 127.0.0.1:7400.
    public func endpoint(
        environment: [String: String], fileExists: (String) -> Bool
    ) throws(CommandFailure) -> ClientConfiguration.Endpoint {
        if let tcp = self.tcp {
            guard let endpoint = GatewayAddress.parseTCP(tcp) else { throw .usage("--tcp must be host:port") }
            return endpoint
        }
        if let unix = self.unix { return .unix(path: unix) }
        if let address = environment["SWITCHBOARD_ADDRESS"], !address.isEmpty {
            guard let endpoint = GatewayAddress.parse(address) else {
                throw .usage("SWITCHBOARD_ADDRESS must be unix:PATH, tcp:HOST:PORT, a path or HOST:PORT, found '\(address)'")
            }
            return endpoint
        }
        if fileExists(GatewayAddress.defaultUnixPath) { return .unix(path: GatewayAddress.defaultUnixPath) }
        return GatewayAddress.defaultTCP
    }

    /// Seconds to wait for each answer: `--timeout`, `SWITCHBOARD_TIMEOUT`, else 30.
    public func timeoutSeconds(environment: [String: String]) throws(CommandFailure) -> Double {
        if let timeout = self.timeout { return timeout }
        guard let text = environment["SWITCHBOARD_TIMEOUT"], !text.isEmpty else { return 30 }
        guard let seconds = Double(text), seconds > 0, seconds <= 86_400 else {
            throw .usage("SWITCHBOARD_TIMEOUT must be a number of seconds, found '\(text)'")
        }
        return seconds
    }

    /// The client configuration these options and the environment describe.
    public func clientConfiguration(
        environment: [String: String], fileExists: (String) -> Bool
    ) throws(CommandFailure) -> ClientConfiguration {
        let token = self.token ?? environment["SWITCHBOARD_TOKEN"] ?? ""
        // With a token the server takes the user from it; in open mode a user id is required.
        let fallbackUser = token.isEmpty ? (environment["USER"].flatMap { $0.isEmpty ? nil : $0 } ?? "sbctl") : ""
        let user = self.user ?? environment["SWITCHBOARD_USER"] ?? fallbackUser
        let endpoint = try self.endpoint(environment: environment, fileExists: fileExists)
        if self.usesTLS, case .unix(let path) = endpoint {
            throw .usage("TLS is for a TCP gateway, but the gateway address is the Unix socket \(path): give --tcp")
        }
        var configuration = ClientConfiguration(endpoint: endpoint, userID: user, token: token)
        configuration.tls = self.tlsSettings
        configuration.deviceID = self.device ?? environment["SWITCHBOARD_DEVICE"] ?? ""
        configuration.clientType = .other
        configuration.clientName = SwitchboardVersion.productName("sbctl")
        let timeout = Duration.milliseconds(Int64(try self.timeoutSeconds(environment: environment) * 1000))
        configuration.requestTimeout = timeout
        configuration.connectTimeout = timeout
        return configuration
    }
}
