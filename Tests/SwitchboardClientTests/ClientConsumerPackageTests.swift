import Foundation
import SwitchboardTestSupport
import Testing

/// An app package next to this checkout that depends on the `SwitchboardClient` product with Docs/client.md's
/// manifest block, word for word: SwiftPM resolves it from the machine's package mirror, and its build plan (the
/// llbuild command graph, printed without building) compiles and links the client's modules and none of the
/// server's. Resolving still fetches every package of switchboard's manifest, GRDB and postgres-nio included:
/// SwiftPM 6.3 reads all of them to pick versions, which Docs/client.md says.
@Suite("An app that depends on the SwitchboardClient product", .serialized)
struct ClientConsumerPackageTests {
    /// What the app's executable must be built from.
    static let needed: Set<String> = [
        "SwitchboardClient", "SwitchboardWire", "CSwitchboardZlib", "NIOCore", "NIOPosix", "NIOSSL", "Logging",
        "ServiceLifecycle",
    ]
    /// What it must not be built from: the server's modules and their dependencies.
    static let serverModules: Set<String> = [
        "SwitchboardServer", "SwitchboardStore", "SwitchboardCluster", "SwitchboardCLI", "GRDB", "GRDBSQLite",
        "PostgresNIO", "JWTKit", "Crypto", "Prometheus", "Configuration", "ArgumentParser", "Metrics", "NIOHTTP1",
        "NIOWebSocket",
    ]

    @Test func theAppsBuildPlanHasTheClientsModulesAndNoneOfTheServers() async throws {
        try await withTemporaryDirectory("sb-consumer") { directory in
            defer {
                try? FileManager.default.removeItem(atPath: directory + "/switchboard")  // the link, not the checkout
                Self.removeLockFiles(of: directory)
            }
            let app = try Self.makeApp(in: directory)

            let resolve = try await Self.swift(["package", "--package-path", app, "resolve"], seconds: 300)
            #expect(resolve.status == 0, "\(resolve.errors)")
            let fetched = Set(try FileManager.default.contentsOfDirectory(atPath: app + "/.build/checkouts"))
            #expect(fetched.isSuperset(of: ["swift-nio", "swift-nio-ssl", "swift-log", "swift-service-lifecycle"]))
            // If this fails, SwiftPM has learnt to leave out packages no used product needs: say so in
            // Docs/client.md's "Platforms".
            #expect(fetched.isSuperset(of: ["GRDB.swift", "postgres-nio", "jwt-kit"]), "fetched: \(fetched.sorted())")

            let plan = try await Self.swift(
                ["build", "--package-path", app, "--print-manifest-job-graph"], seconds: 300)
            #expect(plan.status == 0, "\(plan.errors)")
            let modules = try BuildGraph(dot: plan.output).modules(buildingNodeWhere: {
                $0.hasPrefix("<MyApp-") && $0.hasSuffix("-debug.exe>")
            })
            #expect(modules.isSuperset(of: Self.needed), "missing: \(Self.needed.subtracting(modules).sorted())")
            #expect(modules.isDisjoint(with: Self.serverModules), "built: \(modules.intersection(Self.serverModules).sorted())")
        }
    }

    @Test func theBuildGraphWalkFollowsInputsBackFromTheProduct() throws {
        let dot = """
            digraph Jobs {
              "swiftc" [style=bold];// a.o
              "/s/a.swift" -> "swiftc" [color=blue];
              "swiftc" -> "/b/debug/Client.build/a.o" [color=green];
              "/b/debug/Client.build/a.o" -> "link" [color=blue];
              "/b/debug/GRDB.build/g.o" -> "link 2" [color=blue];
              "link" -> "<App-debug.exe>" [color=green];
              "link 2" -> "<Server-debug.exe>" [color=green];
            }
            """
        let graph = BuildGraph(dot: dot)
        #expect(try graph.modules(buildingNodeWhere: { $0 == "<App-debug.exe>" }) == ["Client", "App"])
        #expect(try graph.modules(buildingNodeWhere: { $0 == "<Server-debug.exe>" }) == ["GRDB", "Server"])
    }

    /// Makes `directory/MyApp` with the doc's manifest block and the quick-start as its program, next to
    /// `directory/switchboard`, a link to this checkout; returns the app's path.
    static func makeApp(in directory: String) throws -> String {
        let block = try #require(try ClientDocTests.swiftBlocks().dropFirst().first)
        #expect(block.hasPrefix("dependencies: ["), "the doc's second Swift block is not the manifest's: \(block)")
        let manifest = """
            // swift-tools-version:6.1
            import PackageDescription

            let package = Package(
                name: "MyApp",
                platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],

            """ + block.split(separator: "\n", omittingEmptySubsequences: false).map { $0.isEmpty ? "" : "    " + $0 }
            .joined(separator: "\n") + ")\n"
        let files = FileManager.default
        try files.createSymbolicLink(atPath: directory + "/switchboard", withDestinationPath: Repository.root.path)
        let app = directory + "/MyApp"
        try files.createDirectory(atPath: app + "/Sources/MyApp", withIntermediateDirectories: true)
        try manifest.write(toFile: app + "/Package.swift", atomically: true, encoding: .utf8)
        try Repository.text("Examples/quickstart/main.swift")
            .write(toFile: app + "/Sources/MyApp/main.swift", atomically: true, encoding: .utf8)
        return app
    }

    /// Removes the lock files SwiftPM left in the temporary directory for the app's build folder
    /// (`_tmp_sb-consumer-1234_MyApp_.build.lock`).
    static func removeLockFiles(of directory: String) {
        let temporary = FileManager.default.temporaryDirectory.path
        let name = URL(fileURLWithPath: directory).lastPathComponent
        for file in (try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? []
        where file.contains("_\(name)_MyApp_") && file.hasSuffix(".lock") {
            try? FileManager.default.removeItem(atPath: temporary + "/" + file)
        }
    }

    /// Runs `swift arguments`.
    static func swift(_ arguments: [String], seconds: Double) async throws -> ProcessRun {
        try await ProcessRun.run("/usr/bin/env", ["swift"] + arguments, seconds: seconds)
    }
}

/// The command graph `swift build --print-manifest-job-graph` prints (Graphviz): an edge from each input to its
/// command, and from each command to its outputs.
struct BuildGraph {
    /// Each node's predecessors: a command's inputs, an output's command.
    private var inputs: [Substring: [Substring]] = [:]

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    init(dot: String) {
        for line in dot.split(separator: "\n") {
            guard let arrow = line.range(of: "\" -> \""), let open = line.firstIndex(of: "\"") else { continue }
            let from = line[line.index(after: open)..<arrow.lowerBound]
            let rest = line[arrow.upperBound...]
            guard let close = rest.firstIndex(of: "\"") else { continue }
            self.inputs[rest[..<close], default: []].append(from)
        }
    }

    /// The modules (`NAME.build/` folders and `<NAME-...>` products) among everything the node matching `target`
    /// is built from, transitively, itself included.
    func modules(buildingNodeWhere target: (Substring) -> Bool) throws -> Set<String> {
        let roots = self.inputs.keys.filter(target)
        guard roots.count == 1, let root = roots.first else {
            throw Failure(description: "\(roots.count) nodes match in the build graph")
        }
        var seen: Set<Substring> = [root]
        var pending = [root]
        while let node = pending.popLast() {
            for input in self.inputs[node] ?? [] where seen.insert(input).inserted {
                pending.append(input)
            }
        }
        var modules: Set<String> = []
        for node in seen {
            if node.hasPrefix("<"), let dash = node.firstIndex(of: "-") {
                modules.insert(String(node[node.index(after: node.startIndex)..<dash]))
            }
            var rest = node[...]
            while let suffix = rest.range(of: ".build/") {
                let start = rest[..<suffix.lowerBound].lastIndex(of: "/").map { rest.index(after: $0) } ?? rest.startIndex
                if start < suffix.lowerBound { modules.insert(String(rest[start..<suffix.lowerBound])) }
                rest = rest[suffix.upperBound...]
            }
        }
        return modules
    }
}
