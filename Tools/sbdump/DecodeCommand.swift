import ArgumentParser
import NIOCore
import SwitchboardDump
import SwitchboardWire

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `sbdump decode`: dumps a recorded byte stream.
struct DecodeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "decode",
        abstract: "Decode a raw frame stream from a capture file or stdin.",
        discussion: """
            Exit status: 0 when every byte decoded as frames with valid bodies, 1 when garbage, a truncated frame or \
            an undecodable body was reported, 2 when the input could not be read (or is not hex, with --hex).
            """)

    @Argument(help: "Capture file to read; '-' or nothing reads standard input.")
    var input: String?

    @Flag(help: "The input is hex text: white space and newlines ignored, '#' starts a comment to the end of the line.")
    var hex = false

    @Option(help: "Frames the stream may hold: any (both directions), c2s (client to server) or s2c (server to client).")
    var direction = "any"

    @OptionGroup var output: OutputOptions
    @OptionGroup var limitOptions: LimitOptions

    func validate() throws {
        guard Self.frameDirection(self.direction) != nil else {
            throw ValidationError("--direction must be any, c2s or s2c")
        }
    }

    static func frameDirection(_ text: String) -> FrameDirection? {
        switch text {
        case "any": return .any
        case "c2s": return .clientToServer
        case "s2c": return .serverToClient
        default: return nil
        }
    }

    func run() throws {
        signal(SIGPIPE, SIG_IGN)
        let path = self.input ?? "-"
        let descriptor = path == "-" ? 0 : open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            Self.printError("sbdump: cannot open \(path): \(String(cString: strerror(errno)))")
            throw ExitCode(2)
        }
        defer { if descriptor != 0 { close(descriptor) } }

        let sink = LineWriterSink(renderer: self.output.renderer)
        var dumper = StreamDumper(limits: self.limitOptions.limits, direction: Self.frameDirection(self.direction) ?? .any)
        var hexDecoder = HexTextDecoder()
        var problems = false
        func report(_ events: [DumpEvent]) {
            for event in events {
                problems = problems || Self.isProblem(event)
                sink.receive(event)
            }
        }

        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                sink.flush()
                Self.printError("sbdump: cannot read \(path): \(String(cString: strerror(errno)))")
                throw ExitCode(2)
            }
            if count == 0 { break }
            var bytes = ByteBuffer()
            if self.hex {
                do {
                    try hexDecoder.decode(chunk[0..<count], into: &bytes)
                } catch {
                    report(dumper.append(bytes))
                    sink.flush()
                    Self.printError("sbdump: \(error)")
                    throw ExitCode(2)
                }
            } else {
                bytes.writeBytes(chunk[0..<count])
            }
            report(dumper.append(bytes))
        }
        if self.hex {
            do {
                try hexDecoder.finish()
            } catch {
                report(dumper.finish())
                sink.flush()
                Self.printError("sbdump: \(error)")
                throw ExitCode(2)
            }
        }
        report(dumper.finish())
        sink.flush()
        if problems { throw ExitCode(1) }
    }

    static func isProblem(_ event: DumpEvent) -> Bool {
        switch event.kind {
        case .garbage, .decodingStopped: return true
        case .frame(let frame):
            if case .failure = frame.content { return true }
            return false
        default: return false
        }
    }

    static func printError(_ text: String) {
        let line = Array((text + "\n").utf8)
        _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    }
}
