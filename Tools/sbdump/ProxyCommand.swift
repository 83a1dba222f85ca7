import ArgumentParser
import Dispatch
import NIOCore
import NIOPosix
import SwitchboardDump

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `sbdump proxy`: a tap between clients and a gateway.
struct ProxyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "proxy",
        abstract: "Forward clients to a gateway and print every frame of both directions.",
        discussion: """
            Addresses are host:port (127.0.0.1:7401, [::1]:7401) or unix:PATH (unix:/tmp/tap.sock); a path with a '/' \
            may omit the unix: prefix. Bytes are forwarded unchanged; decoding never alters or holds them back. A \
            direction that stops decoding (garbage) is still forwarded. SIGINT or SIGTERM stops the proxy.

            TLS: --upstream-tls (or --upstream-tls-ca, --upstream-tls-insecure) connects to a TCP gateway with TLS; \
            --tls-cert and --tls-key accept clients with TLS. The tap decodes the plaintext in between. Login tokens \
            print as <redacted N bytes> unless --show-tokens.
            """)

    @Option(help: "Where clients connect: host:port or unix:PATH.")
    var listen: String

    @Option(help: "The gateway: host:port or unix:PATH.")
    var upstream: String

    @Option(
        help: ArgumentHelp(
            "Write each connection's frames to DIR/connection-<id>.bin, a capture file that 'sbdump FILE' reads.",
            valueName: "dir"))
    var capture: String?

    @Flag(name: .customLong("upstream-tls"), help: "Connect to a TCP upstream with TLS, trusting the system's certificate authorities.")
    var upstreamTLS = false

    @Option(
        name: .customLong("upstream-tls-ca"),
        help: ArgumentHelp("Connect to the upstream with TLS, trusting the CA certificates in this PEM file (implies --upstream-tls).", valueName: "path"))
    var upstreamTLSCA: String?

    @Option(
        name: .customLong("upstream-tls-server-name"),
        help: ArgumentHelp("The name the upstream's certificate must be valid for (default: the upstream's host; implies --upstream-tls).", valueName: "name"))
    var upstreamTLSServerName: String?

    @Flag(
        name: .customLong("upstream-tls-insecure"),
        help: "Connect to the upstream with TLS but accept any certificate (tests and development only; implies --upstream-tls).")
    var upstreamTLSInsecure = false

    @Option(
        name: .customLong("tls-cert"),
        help: ArgumentHelp("Accept clients with TLS on the TCP --listen address, presenting this certificate chain (PEM); needs --tls-key.", valueName: "path"))
    var tlsCert: String?

    @Option(
        name: .customLong("tls-key"),
        help: ArgumentHelp("The private key (PEM) of --tls-cert.", valueName: "path"))
    var tlsKey: String?

    @OptionGroup var output: OutputOptions
    @OptionGroup var limitOptions: LimitOptions

    func validate() throws {
        let listen: TapAddress
        let upstream: TapAddress
        do {
            listen = try TapAddress(parsing: self.listen)
            upstream = try TapAddress(parsing: self.upstream)
        } catch {
            throw ValidationError("\(error)")
        }
        if self.upstreamTLSSettings != nil, case .unix = upstream {
            throw ValidationError("upstream TLS needs a TCP --upstream, not a Unix socket")
        }
        if self.upstreamTLSInsecure, self.upstreamTLSCA != nil {
            throw ValidationError("give --upstream-tls-ca or --upstream-tls-insecure, not both")
        }
        if (self.tlsCert == nil) != (self.tlsKey == nil) {
            throw ValidationError("--tls-cert and --tls-key go together: give both or neither")
        }
        if self.tlsCert != nil, case .unix = listen {
            throw ValidationError("--tls-cert and --tls-key need a TCP --listen address, not a Unix socket")
        }
    }

    /// The upstream TLS the options ask for; nil without any `--upstream-tls` option.
    var upstreamTLSSettings: TapProxyConfiguration.UpstreamTLS? {
        guard self.upstreamTLS || self.upstreamTLSCA != nil || self.upstreamTLSServerName != nil
            || self.upstreamTLSInsecure
        else { return nil }
        return TapProxyConfiguration.UpstreamTLS(
            caCertificatePath: self.upstreamTLSCA, serverName: self.upstreamTLSServerName,
            verifiesCertificate: !self.upstreamTLSInsecure)
    }

    func run() async throws {
        signal(SIGPIPE, SIG_IGN)
        var configuration = TapProxyConfiguration(
            listen: try TapAddress(parsing: self.listen), upstream: try TapAddress(parsing: self.upstream))
        configuration.limits = self.limitOptions.limits
        configuration.captureDirectory = self.capture
        configuration.upstreamTLS = self.upstreamTLSSettings
        if let certificate = self.tlsCert, let key = self.tlsKey {
            configuration.listenTLS = TapProxyConfiguration.ListenTLS(
                certificateChainPath: certificate, privateKeyPath: key)
        }
        if let directory = self.capture {
            guard mkdir(directory, 0o755) == 0 || errno == EEXIST else {
                throw ValidationError("cannot create --capture directory \(directory): \(String(cString: strerror(errno)))")
            }
        }
        let sink = LineWriterSink(renderer: self.output.renderer)
        let proxy: TapProxy
        do {
            proxy = try await TapProxy.start(configuration, sink: sink)
        } catch let error as TapTLSError {
            DecodeCommand.printError("sbdump: \(error)")
            throw ExitCode(2)
        }

        let stopSignals = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { Task { await proxy.stop() } }
            source.resume()
            return source
        }
        await proxy.waitUntilStopped()
        await proxy.stop()  // waits until the connections still open have closed and reported their end
        for source in stopSignals { source.cancel() }
        sink.flush()
    }
}
