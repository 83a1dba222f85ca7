import ArgumentParser
import NIOCore
import SwitchboardCLI
import SwitchboardClient
import SwitchboardWire
import Testing

@Suite("Connection options come from the command line, then the environment, then defaults")
struct ConnectionOptionsTests {
    static func options(_ arguments: String...) throws -> ConnectionOptions {
        try ConnectionOptions.parse(arguments)
    }

    @Test("--tcp and --unix name the gateway; both at once is a usage error")
    func explicitAddresses() throws {
        let tcp = try Self.options("--tcp", "10.0.0.1:7500").endpoint(environment: [:]) { _ in true }
        #expect(tcp == .tcp(host: "10.0.0.1", port: 7500))
        let unix = try Self.options("--unix", "/run/sb.sock").endpoint(environment: ["SWITCHBOARD_ADDRESS": "x:1"]) { _ in false }
        #expect(unix == .unix(path: "/run/sb.sock"))
        #expect(throws: (any Error).self) { try Self.options("--tcp", "a:1", "--unix", "/x") }
        #expect(throws: (any Error).self) { try Self.options("--tcp", "no-port") }
    }

    @Test("SWITCHBOARD_ADDRESS takes unix:, tcp:, a path or host:port")
    func addressFromEnvironment() throws {
        let none = try Self.options()
        let cases: [(String, ClientConfiguration.Endpoint)] = [
            ("unix:/tmp/a.sock", .unix(path: "/tmp/a.sock")), ("tcp:example.org:7400", .tcp(host: "example.org", port: 7400)),
            ("./sb.sock", .unix(path: "./sb.sock")), ("127.0.0.1:9000", .tcp(host: "127.0.0.1", port: 9000)),
            ("tcp:[::1]:7400", .tcp(host: "::1", port: 7400)),
        ]
        for (text, endpoint) in cases {
            #expect(try none.endpoint(environment: ["SWITCHBOARD_ADDRESS": text]) { _ in false } == endpoint, "\(text)")
        }
        #expect(throws: CommandFailure.self) { try none.endpoint(environment: ["SWITCHBOARD_ADDRESS": "nonsense"]) { _ in false } }
    }

    @Test("without an address: ./switchboard.sock when it exists, else TCP 127.0.0.1:7400")
    func defaultAddress() throws {
        let none = try Self.options()
        #expect(try none.endpoint(environment: [:]) { $0 == "./switchboard.sock" } == .unix(path: "./switchboard.sock"))
        #expect(try none.endpoint(environment: [:]) { _ in false } == .tcp(host: "127.0.0.1", port: 7400))
    }

    @Test("user, token, device and timeout come from options, then SWITCHBOARD_* variables")
    func loginFromOptionsAndEnvironment() throws {
        let environment = [
            "SWITCHBOARD_USER": "envUser", "SWITCHBOARD_TOKEN": "eyJ.env", "SWITCHBOARD_DEVICE": "envDevice",
            "SWITCHBOARD_TIMEOUT": "2.5", "USER": "login",
        ]
        let fromEnvironment = try Self.options().clientConfiguration(environment: environment) { _ in false }
        #expect(fromEnvironment.userID == "envUser" && fromEnvironment.token == "eyJ.env")
        #expect(fromEnvironment.deviceID == "envDevice")
        #expect(fromEnvironment.requestTimeout == .milliseconds(2500))
        let fromOptions = try Self.options("--user", "Ann", "--token", "eyJ.opt", "--device", "d", "--timeout", "4")
            .clientConfiguration(environment: environment) { _ in false }
        #expect(fromOptions.userID == "Ann" && fromOptions.token == "eyJ.opt" && fromOptions.deviceID == "d")
        #expect(fromOptions.requestTimeout == .seconds(4) && fromOptions.connectTimeout == .seconds(4))
    }

    @Test("the user defaults to the login name in open mode and to the token's user with a token")
    func defaultUser() throws {
        let open = try Self.options().clientConfiguration(environment: ["USER": "login"]) { _ in false }
        #expect(open.userID == "login")
        let withToken = try Self.options("--token", "eyJ.x").clientConfiguration(environment: ["USER": "login"]) { _ in false }
        #expect(withToken.userID == "")
    }

    @Test("without TLS options the connection is plain; --tls trusts the system's CAs, --tls-ca a PEM file")
    func tlsOptionsMakeTheClientsTLSSettings() throws {
        #expect(try Self.options("--tcp", "h:1").clientConfiguration(environment: [:]) { _ in false }.tls == nil)
        let system = try #require(try Self.options("--tcp", "h:1", "--tls").clientConfiguration(environment: [:]) { _ in false }.tls)
        guard case .system = system.trustRoots else {
            Issue.record("--tls trusts \(system.trustRoots)")
            return
        }
        #expect(system.verification == .full && system.serverName == nil)
        let ca = try #require(
            try Self.options("--tcp", "h:1", "--tls-ca", "/etc/ca.pem", "--tls-server-name", "gw.example")
                .clientConfiguration(environment: [:]) { _ in false }.tls)
        guard case .pemFile(let path) = ca.trustRoots else {
            Issue.record("--tls-ca trusts \(ca.trustRoots)")
            return
        }
        #expect(path == "/etc/ca.pem" && ca.serverName == "gw.example" && ca.verification == .full)
        let insecure = try #require(
            try Self.options("--tcp", "h:1", "--tls-insecure").clientConfiguration(environment: [:]) { _ in false }.tls)
        #expect(insecure.verification == .insecureNoVerification)
    }

    @Test("TLS options with a Unix socket address, or --tls-ca with --tls-insecure, are usage errors")
    func tlsOptionsThatCannotApply() throws {
        #expect(throws: (any Error).self) { try Self.options("--unix", "/run/sb.sock", "--tls") }
        #expect(throws: (any Error).self) { try Self.options("--tcp", "h:1", "--tls-ca", "a.pem", "--tls-insecure") }
        // A Unix socket address from the environment (or the default socket file) is refused, not silently plain.
        let failure = #expect(throws: CommandFailure.self) {
            try Self.options("--tls").clientConfiguration(environment: ["SWITCHBOARD_ADDRESS": "unix:/run/sb.sock"]) { _ in false }
        }
        #expect(failure?.status == .usage)
        #expect(failure?.message.contains("/run/sb.sock") == true)
    }

    @Test("sbctl names itself and the Switchboard version in HELLO's clientName")
    func clientNameCarriesTheVersion() throws {
        let configuration = try Self.options().clientConfiguration(environment: ["USER": "login"]) { _ in false }
        #expect(configuration.clientName == "sbctl/\(SwitchboardVersion.current)")
    }

    @Test("connection options before the command move behind it")
    func leadingOptions() throws {
        let split = LeadingOptions.split(["--json", "--user", "Ann", "--timeout=3", "who-now", "lobby"])
        #expect(split.options == ["--json", "--user", "Ann", "--timeout=3"])
        #expect(split.command == ["who-now", "lobby"])
        #expect(LeadingOptions.join(options: ["--json"], command: ["call", "x", "--", "y"]) == ["call", "x", "--json", "--", "y"])
        #expect(try request("--json", "--user", "Ann", "where-now") == .whereNow(.init()))
        #expect(LeadingOptions.split(["--user"]) == (["--user"], []))
        let tls = LeadingOptions.split(["--tls", "--tls-ca", "ca.pem", "--tls-server-name=gw", "--tls-insecure", "where-now"])
        #expect(tls.options == ["--tls", "--tls-ca", "ca.pem", "--tls-server-name=gw", "--tls-insecure"])
        #expect(tls.command == ["where-now"])
    }
}
