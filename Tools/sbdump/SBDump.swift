import ArgumentParser
import SwitchboardDump
import SwitchboardWire

@main
struct SBDump: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sbdump",
        abstract: "Decode Switchboard frames: from a capture file, from stdin, or live as a tap proxy.",
        discussion: """
            decode (the default) reads a raw frame stream from a file or stdin (binary, or hex with --hex) and prints \
            every frame: header fields, compression ratio, request/response pairing and the body in the spec's JSON \
            rendering. Garbage is reported with its offset, and decoding resumes at the next plausible frame.

            proxy listens for clients, connects each one to the gateway, forwards both directions unchanged and prints \
            every frame with a timestamp, the connection id and the direction, pairing responses with their requests \
            and their latency.

            Login tokens (HELLO's and renewToken's) print as <redacted N bytes> unless --show-tokens is given.

            Docs/sbdump.md has examples and the output formats.
            """,
        version: SwitchboardVersion.current,
        subcommands: [DecodeCommand.self, ProxyCommand.self],
        defaultSubcommand: DecodeCommand.self)
}

/// Output options shared by both modes.
struct OutputOptions: ParsableArguments {
    @Flag(help: "Print JSON lines (one object per event) instead of text.")
    var json = false

    @Option(help: "Text output: cut bodies longer than this many characters (0: never cut).")
    var bodyLimit = TextRenderer.defaultBodyLimit

    @Flag(
        name: .customLong("show-tokens"),
        help: "Print login tokens (HELLO's and renewToken's) as they are; by default they print as <redacted N bytes>.")
    var showTokens = false

    func validate() throws {
        guard self.bodyLimit >= 0 else { throw ValidationError("--body-limit must be 0 or more") }
    }

    var renderer: any DumpRenderer {
        (self.json ? DumpFormat.jsonLines : DumpFormat.text).renderer(
            bodyLimit: self.bodyLimit, showsTokens: self.showTokens)
    }
}

/// Decoding limits shared by both modes.
struct LimitOptions: ParsableArguments {
    @Option(help: "Largest frame length to decode, in bytes (the spec's default maxFrameSize).")
    var maxFrameSize = 1 << 20

    @Option(help: "Largest body a compressed frame may inflate to, in bytes.")
    var maxInflatedSize = 1 << 20

    func validate() throws {
        guard (2...FrameLimits.absoluteMaxFrameSize).contains(self.maxFrameSize) else {
            throw ValidationError("--max-frame-size must be from 2 to \(FrameLimits.absoluteMaxFrameSize)")
        }
        guard self.maxInflatedSize >= 1 else { throw ValidationError("--max-inflated-size must be 1 or more") }
    }

    var limits: FrameLimits {
        FrameLimits(maxFrameSize: self.maxFrameSize, maxInflatedSize: self.maxInflatedSize, compressionEnabled: true)
    }
}
