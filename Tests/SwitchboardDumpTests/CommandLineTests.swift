import Foundation
import NIOCore
import SwitchboardDump
import SwitchboardWire
import SwitchboardTestSupport
import Testing

/// The real `sbdump` executable, run as a child process.
@Suite struct CommandLineTests {
    static var executable: URL {
        // swift test builds every product next to the test bundle.
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("sbdump")
    }

    struct Run {
        var status: Int32
        var output: String
        var errors: String
        var lines: [String] { self.output.split(separator: "\n").map(String.init) }
    }

    /// Runs sbdump with `arguments`, `input` on its standard input; waits without blocking a cooperative thread.
    static func run(_ arguments: [String], input: Data = Data()) async throws -> Run {
        try #require(FileManager.default.isExecutableFile(atPath: Self.executable.path), "build the sbdump product first")
        let temporary = try TemporaryPath.directory("sbdump-cli")
        defer { temporary.remove() }
        let directory = URL(fileURLWithPath: temporary.path)
        let inputFile = directory.appendingPathComponent("stdin")
        let outputFile = directory.appendingPathComponent("stdout")
        let errorFile = directory.appendingPathComponent("stderr")
        try input.write(to: inputFile)
        _ = FileManager.default.createFile(atPath: outputFile.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errorFile.path, contents: nil)

        let process = try SpawnedProcess(
            executable: Self.executable.path, arguments: arguments, stdin: .file(inputFile.path),
            stdout: .file(outputFile.path), stderr: .file(errorFile.path))
        let status = await process.waitForExit(seconds: 60)
        if status == nil {
            process.killAndWait()
            Issue.record("sbdump \(arguments) did not finish")
        }
        return Run(
            status: status ?? -1,
            output: String(decoding: try Data(contentsOf: outputFile), as: UTF8.self),
            errors: String(decoding: try Data(contentsOf: errorFile), as: UTF8.self))
    }

    @Test("a capture file is printed frame by frame and the exit status is 0")
    func decodesCaptureFile() async throws {
        let run = try await Self.run([CaptureFixtureTests.fixture.path])
        #expect(run.status == 0, "\(run.errors)")
        #expect(run.lines.first?.hasPrefix("@0 #1 control hello len=") == true, "\(run.lines.first ?? "")")
        #expect(run.lines.count == StreamDumper.dump(try CaptureFixtureTests.load()).count)
    }

    @Test("a HELLO token prints as <redacted N bytes> unless --show-tokens is given")
    func tokensRedactedUnlessShown() async throws {
        let token = "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0"
        var frame = ByteBuffer()
        FrameEncoder().encode(.control(.hello(Hello(protocolVersion: 1, token: token, userId: "Tony"))), into: &frame)
        let input = Data(frame.readableBytesView)
        let redacted = try await Self.run(["decode", "-"], input: input)
        #expect(redacted.status == 0, "\(redacted.errors)")
        #expect(redacted.output.contains("\"token\":\"<redacted \(token.utf8.count) bytes>\""), "\(redacted.output)")
        #expect(!redacted.output.contains(token))
        let shown = try await Self.run(["decode", "--show-tokens", "--json", "-"], input: input)
        #expect(shown.status == 0, "\(shown.errors)")
        #expect(shown.output.contains(token), "\(shown.output)")
    }

    @Test("proxy TLS options that cannot apply are usage errors")
    func proxyTLSOptionsThatCannotApply() async throws {
        let unixUpstream = try await Self.run(["proxy", "--listen", "127.0.0.1:0", "--upstream", "unix:/tmp/x.sock", "--upstream-tls"])
        #expect(unixUpstream.status == 64)
        #expect(unixUpstream.errors.contains("upstream TLS needs a TCP --upstream"), "\(unixUpstream.errors)")
        let certOnly = try await Self.run(["proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:1", "--tls-cert", "c.pem"])
        #expect(certOnly.status == 64)
        #expect(certOnly.errors.contains("--tls-cert and --tls-key go together"), "\(certOnly.errors)")
        let missingCA = try await Self.run(
            ["proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:1", "--upstream-tls-ca", "/nonexistent/ca.pem"])
        #expect(missingCA.status == 2)
        #expect(missingCA.errors.contains("cannot read CA certificates /nonexistent/ca.pem: No such file"), "\(missingCA.errors)")
    }

    @Test("--json prints one parseable object per line")
    func jsonLinesFromFile() async throws {
        let run = try await Self.run(["decode", "--json", CaptureFixtureTests.fixture.path])
        #expect(run.status == 0, "\(run.errors)")
        #expect(!run.lines.isEmpty)
        for line in run.lines {
            let json = try JSONValue.parse(line)
            #expect(json["event"] != nil)
        }
    }

    @Test("hex from stdin with garbage: the garbage line names its offset, and the exit status is 1")
    func hexStdinWithGarbage() async throws {
        let text = """
            # PING, then three bytes of garbage, then PONG
            04 00 03 08 2a
            02 02 03
            04 00 04 08 2a
            """
        let run = try await Self.run(["--hex", "-"], input: Data(text.utf8))
        #expect(run.status == 1, "\(run.errors)")
        #expect(
            run.lines == [
                #"@0 #1 control ping len=4 flags=0x00 body={"nonce":42}"#,
                "@5 garbage badHeader(1004): ERROR flag on a control frame; skipped 3 bytes, resynchronised at @8",
                #"@8 #2 control pong len=4 flags=0x00 body={"nonce":42}"#,
            ])
    }

    @Test("text that is not hex is refused with its line and column, exit status 2")
    func badHexIsRefused() async throws {
        let run = try await Self.run(["--hex"], input: Data("04 00 03\n08 zz\n".utf8))
        #expect(run.status == 2)
        #expect(run.errors.contains("line 2, column 4"), "\(run.errors)")
    }

    @Test("a missing file is reported, exit status 2")
    func missingFile() async throws {
        let run = try await Self.run(["/nonexistent/capture.bin"])
        #expect(run.status == 2)
        #expect(run.errors.contains("cannot open /nonexistent/capture.bin"), "\(run.errors)")
    }

    @Test("the proxy refuses an address it cannot parse")
    func proxyRefusesBadAddress() async throws {
        let run = try await Self.run(["proxy", "--listen", "127.0.0.1", "--upstream", "unix:/tmp/x.sock"])
        #expect(run.status != 0)
        #expect(run.errors.contains("bad address \"127.0.0.1\""), "\(run.errors)")
    }
}
