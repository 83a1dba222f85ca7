import Foundation

/// A fresh name in the temporary directory for one test's database, file, directory or Unix socket, and the removal
/// of everything that ends up under that name.
///
/// Create it where the test starts and remove it when the test ends, pass or fail, once nothing uses it any more
/// (after any child process on it was stopped or killed):
///
///     let database = TemporaryPath("sb-kill", suffix: ".sqlite")
///     defer { database.remove() }
///
/// or, for a directory, ``withTemporaryDirectory(_:isolation:_:)``.
public struct TemporaryPath: Sendable, CustomStringConvertible {
    /// The files SQLite keeps next to a database: the write-ahead log, its shared-memory index, the rollback journal.
    public static let sqliteSuffixes = ["", "-wal", "-shm", "-journal"]

    /// Everything a gateway keeps next to its metadata database: that database, the event store (`.events`) and the
    /// profile store (`.profiles`), each with its SQLite files (``sqliteSuffixes``).
    public static let siblingSuffixes = ["", ".events", ".profiles", ".moderation"].flatMap { store in
        Self.sqliteSuffixes.map { store + $0 }
    }

    /// The path (nothing is created there).
    public let path: String

    /// `<temporary directory>/<prefix>-<random number><suffix>`.
    public init(_ prefix: String, suffix: String = "") {
        self.path = FileManager.default.temporaryDirectory
            .appendingPathComponent("\(prefix)-\(UInt32.random(in: 0...UInt32.max))\(suffix)").path
    }

    private init(path: String) {
        self.path = path
    }

    /// `/tmp/<prefix>-<random number>.sock`: always under `/tmp`, whatever `TMPDIR` says, because a Unix socket path
    /// must fit `sun_path` (108 bytes).
    public static func socket(_ prefix: String) -> TemporaryPath {
        TemporaryPath(path: "/tmp/\(prefix)-\(UInt32.random(in: 0...UInt32.max)).sock")
    }

    /// A fresh, empty directory `<temporary directory>/<prefix>-<random number>`.
    /// - Throws: `FileManager`'s error when the directory cannot be created.
    public static func directory(_ prefix: String) throws -> TemporaryPath {
        let directory = TemporaryPath(prefix)
        try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true)
        return directory
    }

    public var description: String { self.path }

    /// Removes the path, whatever it is (file, socket, directory with its contents), and its siblings
    /// (``siblingSuffixes``); what does not exist is skipped.
    public func remove() {
        for suffix in Self.siblingSuffixes {
            try? FileManager.default.removeItem(atPath: self.path + suffix)
        }
    }
}

/// Runs `body` with a fresh, empty temporary directory (``TemporaryPath/directory(_:)``) and removes the directory
/// with everything in it afterwards, whether `body` returns or throws.
public func withTemporaryDirectory<T>(
    _ prefix: String, isolation: isolated (any Actor)? = #isolation, _ body: (String) async throws -> T
) async throws -> T {
    let directory = try TemporaryPath.directory(prefix)
    defer { directory.remove() }
    return try await body(directory.path)
}
