import Configuration
import Foundation
import SwitchboardTestSupport
import Testing

@testable import switchboard

/// Every numeric option has a range, checked the same way whether the value comes from the command line, the
/// environment or the configuration file: a value outside it stops the start with exit status 64 and a message
/// naming the option where it was given, before anything is opened or bound.
@Suite struct OptionRangeTests {
    /// One value just outside one option's range.
    struct OutOfRange: Sendable, CustomTestStringConvertible {
        var key: String
        var value: Int
        var range: ClosedRange<Int>
        var testDescription: String { "\(self.key) \(self.value)" }
    }

    /// Where a value is given.
    enum Source: Sendable, CaseIterable { case flag, environment, configFile }

    /// The value below and the value above the range of every numeric option.
    static let outOfRange: [OutOfRange] = ServeSettings.keys.flatMap { key -> [OutOfRange] in
        guard let range = key.range else { return [] }
        return [range.lowerBound - 1, range.upperBound + 1].map { OutOfRange(key: key.name, value: $0, range: range) }
    }

    @Test func everyNumericOptionHasARange() {
        let numeric = ServeSettings.keys.filter { $0.type == .int }.map(\.name)
        #expect(Set(Self.outOfRange.map(\.key)) == Set(numeric))
        #expect(numeric.count == 29)
    }

    /// The arguments and environment that give `key` the value `value` from `source`, and the name the message
    /// gives that setting.
    static func give(_ key: String, _ value: String, from source: Source, in directory: String) throws -> (
        arguments: [String], environment: [String: String], name: String
    ) {
        switch source {
        case .flag:
            return (["--\(key)=\(value)"], [:], "--\(key)")  // = so that -1 is not taken for an option
        case .environment:
            let variable = ServeSettings.environmentVariable(for: key)
            return ([], [variable: value], variable)
        case .configFile:
            let path = directory + "/switchboard.json"
            try "{\"\(key)\": \(value)}".write(toFile: path, atomically: true, encoding: .utf8)
            return (["--config", path], [:], "config file \(path): \"\(key)\"")
        }
    }

    @Test(arguments: Self.outOfRange, Source.allCases)
    func aValueOutsideItsRangeStopsTheStartNamingTheOption(_ case: OutOfRange, source: Source) async throws {
        try await withTemporaryDirectory("sb-range") { directory in
            let given = try Self.give(`case`.key, "\(`case`.value)", from: source, in: directory)
            let run = try await SwitchboardExecutable.run(
                SwitchboardExecutable.gatewayArguments(in: directory) + given.arguments,
                environment: SwitchboardExecutable.environment(given.environment))
            let message = "\(given.name) must be \(`case`.range.lowerBound)-\(`case`.range.upperBound), not \(`case`.value)"
            #expect(run.status == 64, "\(run.errors)")
            #expect(run.errors.contains(message), "expected \(message)\n\(run.errors)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/gw.sqlite"), "it opened its database")
        }
    }

    @Test(arguments: Source.allCases)
    func aHardCapBelowTheHighWaterMarkStopsTheStart(source: Source) async throws {
        try await withTemporaryDirectory("sb-range") { directory in
            let given = try Self.give("outbound-hard-cap", "65536", from: source, in: directory)
            let run = try await SwitchboardExecutable.run(
                SwitchboardExecutable.gatewayArguments(in: directory) + given.arguments + ["--outbound-high-water", "131072"],
                environment: SwitchboardExecutable.environment(given.environment))
            #expect(run.status == 64, "\(run.errors)")
            let message = "\(given.name) (65536) must be at least --outbound-high-water (131072)"
            #expect(run.errors.contains(message), "expected \(message)\n\(run.errors)")
        }
    }

    /// The bounds themselves are accepted (a gateway with every number at its lowest, or at its highest, resolves).
    @Test func theBoundsOfEveryRangeAreAccepted() throws {
        for pick in [\ClosedRange<Int>.lowerBound, \ClosedRange<Int>.upperBound] {
            var commandLine: [String: ConfigContent] = [:]
            for key in ServeSettings.keys {
                if let range = key.range { commandLine[key.name] = .int(range[keyPath: pick]) }
            }
            // The hard cap's lowest is below the high-water mark's highest: keep them in order.
            commandLine["outbound-hard-cap"] = .int(max(
                ServeSettings.keys.first { $0.name == "outbound-hard-cap" }!.range!.lowerBound,
                ServeSettings.keys.first { $0.name == "outbound-high-water" }!.range![keyPath: pick]))
            let settings = try ServeSettings.resolve(commandLine: commandLine, environment: [:], configFile: nil)
            #expect(settings.threads == ServeSettings.keys.first { $0.name == "threads" }!.range![keyPath: pick])
        }
    }
}
