import Foundation
import SwitchboardTestSupport
import Testing

/// What an app gets by depending on the `SwitchboardClient` or `SwitchboardWire` product: read from the package's
/// manifest as SwiftPM evaluates it (`swift package dump-package`), the targets and external products each product
/// is built from, transitively. None of the server's (GRDB, postgres-nio, jwt-kit, swift-prometheus,
/// swift-configuration, the server, store and cluster targets) may be among them.
@Suite struct ClientDependencyTests {
    /// What the client's product may be built from: its targets and, per package, the products it uses.
    static let clientAllowed: Set<String> = [
        "target SwitchboardClient", "target SwitchboardWire", "target CSwitchboardZlib",
        "swift-nio NIOCore", "swift-nio NIOPosix", "swift-nio NIOTLS", "swift-nio-ssl NIOSSL", "swift-log Logging",
        "swift-service-lifecycle ServiceLifecycle",
    ]
    static let wireAllowed: Set<String> = ["target SwitchboardWire", "target CSwitchboardZlib", "swift-nio NIOCore"]
    static let serverPackages = ["GRDB.swift", "postgres-nio", "jwt-kit", "swift-prometheus", "swift-configuration", "swift-crypto"]

    @Test func theClientAndWireProductsAreBuiltOnlyFromTheAllowedTargetsAndProducts() async throws {
        let manifest = try await PackageManifest.load()
        let client = try manifest.closure(ofProduct: "SwitchboardClient")
        let wire = try manifest.closure(ofProduct: "SwitchboardWire")
        #expect(client.isSubset(of: Self.clientAllowed), "not allowed: \(client.subtracting(Self.clientAllowed).sorted())")
        #expect(wire.isSubset(of: Self.wireAllowed), "not allowed: \(wire.subtracting(Self.wireAllowed).sorted())")
        #expect(client.contains("target SwitchboardWire") && client.contains("swift-nio NIOPosix"))
        for package in Self.serverPackages {
            #expect(!client.contains { $0.hasPrefix(package + " ") })
        }
    }

    @Test func theClosureFollowsTargetDependenciesTransitively() async throws {
        // The server's product reaches GRDB only through SwitchboardStore: the walk must go through targets.
        let server = try await PackageManifest.load().closure(ofProduct: "SwitchboardServer")
        #expect(server.contains("target SwitchboardStore"))
        #expect(server.contains("GRDB.swift GRDB"))
        #expect(server.contains("jwt-kit JWTKit"))
        #expect(!server.isSubset(of: Self.clientAllowed))
    }
}

/// The package's manifest as `swift package dump-package` prints it: targets with their dependencies, products
/// with their targets.
struct PackageManifest {
    /// Each target's dependencies: `target NAME` for one of this package's targets, `PACKAGE PRODUCT` for another
    /// package's product.
    var targets: [String: [String]] = [:]
    /// Each product's targets.
    var products: [String: [String]] = [:]

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Reads this checkout's manifest (with a scratch path of its own, so a running `swift test` holding the
    /// package's build folder does not matter).
    static func load() async throws -> PackageManifest {
        let scratch = TemporaryPath("sb-dump-package", suffix: "")
        defer { scratch.remove() }
        let run = try await ProcessRun.run(
            "/usr/bin/env",
            ["swift", "package", "--package-path", Repository.root.path, "--scratch-path", scratch.path, "dump-package"],
            seconds: 120)
        guard run.status == 0 else { throw Failure(description: "swift package dump-package failed: \(run.errors)") }
        return try PackageManifest(json: Data(run.output.utf8))
    }

    init(json: Data) throws {
        guard let root = try JSONSerialization.jsonObject(with: json) as? [String: Any],
            let targets = root["targets"] as? [[String: Any]], let products = root["products"] as? [[String: Any]]
        else { throw Failure(description: "dump-package's JSON has no targets or products") }
        let names = Set(targets.compactMap { $0["name"] as? String })
        for target in targets {
            guard let name = target["name"] as? String else { continue }
            var dependencies: [String] = []
            for dependency in target["dependencies"] as? [[String: Any]] ?? [] {
                if let byName = dependency["byName"] as? [Any], let other = byName.first as? String {
                    // A bare name is this package's target, or else a product of the package of the same name.
                    dependencies.append(names.contains(other) ? "target \(other)" : "\(other) \(other)")
                } else if let target = dependency["target"] as? [Any], let other = target.first as? String {
                    dependencies.append("target \(other)")
                } else if let product = dependency["product"] as? [Any], let productName = product.first as? String,
                    product.count > 1, let package = product[1] as? String
                {
                    dependencies.append("\(package) \(productName)")
                } else {
                    throw Failure(description: "\(name): a dependency this test cannot read: \(dependency)")
                }
            }
            self.targets[name] = dependencies
        }
        for product in products {
            guard let name = product["name"] as? String, let targets = product["targets"] as? [String] else { continue }
            self.products[name] = targets
        }
    }

    /// Every target and external product `product` is built from, transitively through this package's targets.
    func closure(ofProduct product: String) throws -> Set<String> {
        guard let roots = self.products[product] else { throw Failure(description: "no product \(product)") }
        var seen: Set<String> = []
        var pending = roots.map { "target \($0)" }
        while let next = pending.popLast() {
            guard seen.insert(next).inserted, next.hasPrefix("target ") else { continue }
            let name = String(next.dropFirst("target ".count))
            guard let dependencies = self.targets[name] else { throw Failure(description: "no target \(name)") }
            pending += dependencies
        }
        return seen
    }
}
