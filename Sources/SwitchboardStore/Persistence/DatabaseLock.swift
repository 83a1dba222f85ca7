#if canImport(Glibc)
import Glibc
#endif

/// An exclusive hold on a gateway's database files, so that a second gateway cannot open them while one runs.
///
/// Two gateways on one SQLite file would each serve from their own memory and answer conflicting writes with the
/// same revisions; SQLite's own locking only serialises their transactions. The lock is a BSD `flock` on each file
/// (created empty when missing, which SQLite takes for a new database): independent of SQLite's POSIX locks, held
/// for as long as the descriptors stay open, and released by the kernel when the process ends, however it ends
/// (a crashed gateway never leaves a stale lock behind).
public final class DatabaseLock: Sendable {
    /// The files held.
    public let paths: [String]
    private let descriptors: [CInt]

    /// Takes the lock on each of `paths`, or none of them.
    ///
    /// - Throws: ``DatabaseLockError`` naming the file another process holds, or one that cannot be opened.
    public init(paths: [String]) throws(DatabaseLockError) {
        var descriptors: [CInt] = []
        for path in paths {
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                let error = errno
                for held in descriptors { close(held) }
                throw DatabaseLockError(
                    path: path, reason: String(cString: strerror(error)), isHeldElsewhere: false, errorNumber: error)
            }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                let error = errno
                close(fd)
                for held in descriptors { close(held) }
                let busy = error == EWOULDBLOCK
                throw DatabaseLockError(
                    path: path, reason: busy ? "another gateway is using it" : String(cString: strerror(error)),
                    isHeldElsewhere: busy, errorNumber: error)
            }
            descriptors.append(fd)
        }
        self.paths = paths
        self.descriptors = descriptors
    }

    /// Locks a gateway's metadata database at `databasePath` and the event and profile databases beside it.
    public convenience init(databasePath: String) throws(DatabaseLockError) {
        try self.init(paths: Self.gatewayFiles(databasePath: databasePath))
    }

    /// The database files of a gateway whose metadata database is `databasePath`.
    public static func gatewayFiles(databasePath: String) -> [String] {
        [databasePath, databasePath + ".events", databasePath + ".profiles", databasePath + ".moderation"]
    }

    deinit {
        for fd in self.descriptors { close(fd) }  // closing the last descriptor of each file releases its lock
    }
}

/// Why a ``DatabaseLock`` could not be taken.
public struct DatabaseLockError: Error, CustomStringConvertible, Sendable {
    /// The file that could not be locked.
    public var path: String
    /// What stood in the way.
    public var reason: String
    /// Whether another process holds the lock (rather than the file being unusable).
    public var isHeldElsewhere: Bool
    /// The system's error number (`errno`) of the failed `open` or `flock`: `ENOENT` for a missing directory,
    /// `EROFS` for a read-only file system, `EACCES` without permission.
    public var errorNumber: Int32 = 0

    public var description: String {
        "cannot lock database \(self.path): \(self.reason)"
    }
}
