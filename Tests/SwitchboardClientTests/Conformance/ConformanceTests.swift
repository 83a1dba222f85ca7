import Foundation
import SwitchboardClient
import Testing

/// Protocol/conformance/scenarios.json, the live scenarios every client runs (the Python and JavaScript clients run
/// the same file), run with the Swift client: one test case per scenario, each against a gateway of its own.
@Suite("Conformance scenarios with the Swift client", .serialized)
struct ConformanceTests {
    static let scenariosPath = "Protocol/conformance/scenarios.json"

    static func document() throws -> JSONValue { try JSONValue.parse(try Repository.text(Self.scenariosPath)) }

    static func schema() throws -> ProtocolSchema { try ProtocolSchema(text: try Repository.text("Protocol/schema.json")) }

    /// The scenarios' names, read when the tests are listed (an unreadable file gives none, which
    /// ``everyScenarioInTheFileIsATestCase()`` fails on).
    static let scenarioNames: [String] =
        ((try? Self.document())?["scenarios"]?.arrayValue ?? []).compactMap { $0["name"]?.stringValue }

    @Test("every scenario in the file is a test case, and every step kind is one the runner performs")
    func everyScenarioInTheFileIsATestCase() throws {
        let scenarios = try #require(try Self.document()["scenarios"]?.arrayValue)
        #expect(scenarios.compactMap { $0["name"]?.stringValue } == Self.scenarioNames)
        #expect(Set(Self.scenarioNames).count == scenarios.count)
        #expect(
            Set(Self.scenarioNames).isSuperset(of: [
                "login.open.tcp", "login.open.unix", "login.token", "storage.revisions", "locks", "presence", "events",
                "profiles", "compression.push", "reconnect.resubscribe", "errors", "logout.goaway",
            ]))
        for scenario in scenarios {
            for step in scenario["steps"]?.arrayValue ?? [] {
                #expect(ConformanceRunner.stepKinds.contains(step["do"]?.stringValue ?? ""), "\(step)")
            }
        }
    }

    @Test("scenario", .timeLimit(.minutes(2)), arguments: Self.scenarioNames)
    func scenario(_ name: String) async throws {
        let document = try Self.document()
        let scenario = try #require(document["scenarios"]?.arrayValue?.first { $0["name"]?.stringValue == name })
        try await ConformanceRunner(document: document, scenario: scenario, schema: try Self.schema()).run()
    }

    @Test("the matching rules: named members only, arrays whole, $any for anything present, booleans never numbers")
    func matchingRules() throws {
        let match = { (expected: String, actual: String) throws in
            try ConformanceMatching.match(try JSONValue.parse(expected), try JSONValue.parse(actual))
        }
        try match(#"{"a": 1, "b": [{"c": "$any"}]}"#, #"{"a": 1, "b": [{"c": 0, "d": 2}], "e": 3}"#)
        for (expected, actual) in [
            (#"{"a": 1}"#, #"{"a": 2}"#), (#"{"a": 1}"#, "{}"), ("[1]", "[1, 2]"), (#"{"a": true}"#, #"{"a": 1}"#),
            (#"{"a": "$any"}"#, "{}"),
        ] {
            #expect(throws: ConformanceMatching.Mismatch.self, "\(expected) against \(actual)") {
                try match(expected, actual)
            }
        }
    }

    @Test("values: $name is a saved value, $repeat a repeated string, other strings stay")
    func values() throws {
        let resolved = try ConformanceMatching.resolve(
            try JSONValue.parse(#"{"r": "$rev", "d": {"$repeat": "ab", "times": 3}, "s": "$other"}"#),
            saved: ["rev": .number("4")])
        #expect(resolved == (try JSONValue.parse(#"{"r": 4, "d": "ababab", "s": "$other"}"#)))
    }

    @Test("a body is compared with its absent fields at their defaults, from the schema")
    func absentFieldsAtTheirDefaults() throws {
        let event = try Self.schema().withDefaults(
            Push.storageEvent(StorageEvent(eventType: .snapshot, target: "lobby")).jsonBody, as: .push("storageEvent"))
        try ConformanceMatching.match(
            try JSONValue.parse(
                #"{"storageType": "user", "eventType": "snapshot", "target": "lobby", "majorRevision": 0, "items": [], "publisher": ""}"#),
            event)
        let goAway = try Self.schema().withDefaults(GoAway(code: 0).jsonValue, as: .control("goAway"))
        #expect(goAway["reason"] == .string("protocolError"))
        #expect(goAway["lastRequestId"] == .number("0"))
    }
}
