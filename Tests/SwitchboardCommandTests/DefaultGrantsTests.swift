import Foundation
import SwitchboardServer
import SwitchboardTestSupport
import Testing

@testable import switchboard

/// `--default-grants` (`Docs/configuration.md`): read like every other setting, JSON or `@PATH`, and checked at start:
/// a value that cannot be used stops the gateway with exit status 64 and says why.
@Suite struct DefaultGrantsTests {
    static let claim = #"[{"on":"message:room:*","allow":["read","presence"]}]"#

    @Test func theOptionComesFromTheCommandLineTheEnvironmentOrTheFile() async throws {
        #expect(try await ServeSettingsTests.settings(["--default-grants", Self.claim]).defaultGrants == Self.claim)
        let fromEnvironment = try await ServeSettingsTests.settings([], environment: ["SWITCHBOARD_DEFAULT_GRANTS": "@/etc/grants.json"])
        #expect(fromEnvironment.defaultGrants == "@/etc/grants.json")
        let fromFile = try await ServeSettingsTests.withConfigFile(#"{"default-grants": "[]"}"#) { path in
            try await ServeSettingsTests.settings(["--config", path])
        }
        #expect(fromFile.defaultGrants == "[]")
        #expect(try await ServeSettingsTests.settings([]).defaultGrants == nil)
    }

    @Test func theGatewayGetsTheGrantsInlineOrFromAFile() async throws {
        var settings = ServeSettings()
        #expect(try settings.serverConfiguration().defaultGrants == .ownDataOnly)
        settings.defaultGrants = Self.claim
        let expected = try GrantSet(jsonText: Self.claim)
        #expect(try settings.serverConfiguration().defaultGrants == expected)
        try await withTemporaryDirectory("sb-grants") { directory in
            let path = directory + "/grants.json"
            try Self.claim.write(toFile: path, atomically: true, encoding: .utf8)
            settings.defaultGrants = "@" + path
            #expect(try settings.serverConfiguration().defaultGrants == expected)
        }
    }

    @Test(arguments: [
        ("not json", "--default-grants: grants are not JSON"),
        (#"{"on":"message:x","allow":["read"]}"#, "--default-grants: grants must be an array"),
        (#"[{"on":"message:x","allow":["fly"]}]"#, "--default-grants: unknown permission"),
        (#"[{"on":"planet:x","allow":["read"]}]"#, "--default-grants: unknown resource kind in planet:x"),
        (#"[{"on":"message:a*b","allow":["read"]}]"#, "--default-grants: bad pattern in message:a*b"),
        ("@/no/such/grants.json", "--default-grants file /no/such/grants.json cannot be read"),
    ])
    func anUnusableValueStopsTheStartWithStatus64(value: String, message: String) async throws {
        try await withTemporaryDirectory("sb-grants") { directory in
            let run = try await SwitchboardExecutable.run(
                SwitchboardExecutable.gatewayArguments(in: directory) + ["--default-grants", value])
            #expect(run.status == 64, "\(run.errors)")
            #expect(run.errors.contains(message), "\(run.errors)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/gw.sock"), "it listened")
        }
    }
}
