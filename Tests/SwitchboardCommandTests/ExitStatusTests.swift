import Foundation
import SwitchboardTestSupport
import Testing

@testable import switchboard

/// A gateway that cannot take its database exits with a status that says why (Docs/configuration.md, "Exit
/// statuses"): 3 when another gateway uses it (StartupGuardTests), 4 when its directory is missing, 5 when it cannot
/// be written.
@Suite struct ExitStatusTests {
    @Test func aMissingDataDirectoryExits4() async throws {
        try await withTemporaryDirectory("sb-exit") { directory in
            let database = directory + "/no-such-directory/gw.sqlite"
            let run = try await SwitchboardExecutable.run(
                ["--tcp", "off", "--unix-socket", directory + "/gw.sock", "--database", database])
            #expect(run.status == StartFailure.databaseDirectoryMissing, "\(run.errors)")
            #expect(run.status == 4)
            #expect(run.errors.contains("cannot lock database \(database): No such file or directory"), "\(run.errors)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/gw.sock"), "it listened")
        }
    }

    /// The data directory on a read-only file system: a tmpfs mounted read-only in a mount namespace of the
    /// child's own (`unshare --user --map-root-user --mount`, which needs no privilege where user namespaces are
    /// enabled).
    @Test func aReadOnlyFileSystemExits5() async throws {
        try await withTemporaryDirectory("sb-exit") { directory in
            let readOnly = directory + "/read-only"
            try FileManager.default.createDirectory(atPath: readOnly, withIntermediateDirectories: true)
            let database = readOnly + "/gw.sqlite"
            let script = """
                mount -t tmpfs -o ro tmpfs '\(readOnly)' || exit 99
                exec '\(SwitchboardExecutable.path)' --tcp off --unix-socket '\(directory)/gw.sock' --database '\(database)'
                """
            let run = try await SwitchboardExecutable.run(
                ["--user", "--map-root-user", "--mount", "/bin/sh", "-c", script], executable: "/usr/bin/unshare")
            #expect(run.status != 99, "could not mount a read-only file system for the test: \(run.errors)")
            #expect(run.status == StartFailure.databaseNotWritable, "\(run.errors)")
            #expect(run.status == 5)
            #expect(run.errors.contains("cannot lock database \(database): Read-only file system"), "\(run.errors)")
        }
    }
}
