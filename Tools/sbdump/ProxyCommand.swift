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

    @OptionGroup var output: OutputOptions
    @OptionGroup var limitOptions: LimitOptions

    func validate() throws {
        do {
            _ = try TapAddress(parsing: self.listen)
            _ = try TapAddress(parsing: self.upstream)
        } catch {
            throw ValidationError("\(error)")
        }
    }

    func run() async throws {
        signal(SIGPIPE, SIG_IGN)
        var configuration = TapProxyConfiguration(
            listen: try TapAddress(parsing: self.listen), upstream: try TapAddress(parsing: self.upstream))
        configuration.limits = self.limitOptions.limits
        configuration.captureDirectory = self.capture
        if let directory = self.capture {
            guard mkdir(directory, 0o755) == 0 || errno == EEXIST else {
                throw ValidationError("cannot create --capture directory \(directory): \(String(cString: strerror(errno)))")
            }
        }
        let sink = LineWriterSink(renderer: self.output.renderer)
        let proxy = try await TapProxy.start(configuration, sink: sink)

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
