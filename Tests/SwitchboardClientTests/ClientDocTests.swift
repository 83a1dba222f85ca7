import Foundation
import SwitchboardTestSupport
import Testing

/// Docs/client.md's Swift: its quick-start is Examples/quickstart/main.swift word for word; its other blocks are the
/// `// doc:` regions of Examples/doc-examples/DocExamples.swift word for word, in order (but the manifest block, which
/// ClientConsumerPackageTests builds a package with); both programs run against a live gateway.
@Suite("Docs/client.md's examples", .serialized)
struct ClientDocTests {
    /// The ```swift blocks of `file` (default Docs/client.md), in order.
    static func swiftBlocks(of file: String = "Docs/client.md") throws -> [String] {
        let text = try Repository.text(file)
        var blocks: [String] = []
        var current: [Substring]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```swift" {
                current = []
            } else if let lines = current, line == "```" {
                blocks.append(lines.map { $0 + "\n" }.joined())
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    @Test func theDocShowsTheQuickstartFileWordForWordInAboutTenLines() throws {
        let example = try Repository.text("Examples/quickstart/main.swift")
        #expect(try Self.swiftBlocks().first == example)
        #expect(example.split(separator: "\n").count <= 11)
    }

    @Test func theReadmeShowsTheQuickstartFileWordForWord() throws {
        let example = try Repository.text("Examples/quickstart/main.swift")
        let usage = try Self.swiftBlocks(of: "README.md").filter { $0.hasPrefix("import SwitchboardClient") }
        #expect(usage == [example])
    }

    /// The `// doc:NAME` ... `// doc:end` regions of `text`, in order, each without its marks' indentation.
    static func regions(in text: String) -> [String] {
        var regions: [String] = []
        var current: [Substring]?
        var indentation = ""
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.drop { $0 == " " }
            if trimmed == "// doc:end" {
                regions.append((current ?? []).map { $0.dropFirst($0.hasPrefix(indentation) ? indentation.count : 0) + "\n" }.joined())
                current = nil
            } else if trimmed.hasPrefix("// doc:"), current == nil {
                current = []
                indentation = String(line.prefix { $0 == " " })
            } else {
                current?.append(line)
            }
        }
        return regions
    }

    /// A doc block without its leading `import` lines (and the blank line after them), and the modules they import.
    static func withoutImports(_ block: String) -> (code: String, imports: [String]) {
        var lines = block.split(separator: "\n", omittingEmptySubsequences: false)[...]
        var imports: [String] = []
        while let first = lines.first, first.hasPrefix("import ") {
            imports.append(String(first.dropFirst("import ".count)))
            lines = lines.dropFirst()
        }
        if !imports.isEmpty, lines.first == "" { lines = lines.dropFirst() }
        return (lines.joined(separator: "\n"), imports)
    }

    @Test func theDocsOtherBlocksAreTheExampleProgramsRegionsWordForWord() throws {
        let source = try Repository.text("Examples/doc-examples/DocExamples.swift")
        let regions = Self.regions(in: source)
        // The first block is the quick-start, the second the manifest (ClientConsumerPackageTests).
        let blocks = try Self.swiftBlocks().dropFirst(2).map(Self.withoutImports)
        #expect(regions.count >= 9)
        #expect(blocks.map(\.code) == regions)
        for module in blocks.flatMap(\.imports) {
            #expect(source.contains("\nimport \(module)\n"), "the doc imports \(module), the examples do not")
        }
    }

    @Test func theDocExamplesRunInOrderAgainstALiveGatewayAndATLSOne() async throws {
        let examples = Repository.executable("switchboard-doc-examples")
        try #require(FileManager.default.isExecutableFile(atPath: examples), "build the switchboard-doc-examples product first")
        let gateway = try await GatewayProcess.start(executable: Repository.executable("switchboard"))
        let tlsGateway: GatewayProcess
        do {
            tlsGateway = try await GatewayProcess.start(
                executable: Repository.executable("switchboard"),
                arguments: ["--tls-cert", TLSFixtures.serverCertificatePath, "--tls-key", TLSFixtures.serverKeyPath])
        } catch {
            await gateway.stop()
            throw error
        }
        let run: ProcessRun
        do {
            run = try await ProcessRun.run(
                examples, ["\(gateway.port)", "\(tlsGateway.port)", TLSFixtures.caCertificatePath], seconds: 90)
        } catch {
            await gateway.stop()
            await tlsGateway.stop()
            throw error
        }
        await gateway.stop()
        await tlsGateway.stop()
        #expect(run.status == 0, "\(run.errors)")
        // The blocks' own tasks print too, until the clients close, in any order with the last line.
        #expect(run.output.split(separator: "\n").contains("ran 9 doc examples"), "\(run.output)")
    }

    @Test func theQuickstartRunsAgainstALiveGateway() async throws {
        let quickstart = Repository.executable("switchboard-quickstart")
        try #require(FileManager.default.isExecutableFile(atPath: quickstart), "build the switchboard-quickstart product first")
        let gateway = try await GatewayProcess.start(executable: Repository.executable("switchboard"))
        let run: ProcessRun
        do {
            run = try await ProcessRun.run(quickstart, ["\(gateway.port)"], seconds: 60)
        } catch {
            await gateway.stop()
            throw error
        }
        await gateway.stop()
        #expect(run.status == 0, "\(run.errors)")
        #expect(run.output == "tony set news\n")
    }
}
