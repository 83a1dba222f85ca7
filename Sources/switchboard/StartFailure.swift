import Foundation
import SwitchboardStore

/// The exit status of a gateway that could not take its database files (Docs/configuration.md, "Exit statuses"),
/// so that a supervisor tells a second gateway from a deployment error without reading the log.
struct StartFailure {
    /// Another gateway is using the database: it holds the lock on one of the files.
    static let databaseInUse: Int32 = 3
    /// The database's directory does not exist (or a component of its path is not a directory).
    static let databaseDirectoryMissing: Int32 = 4
    /// The database file cannot be created or opened for writing: a read-only file system, no permission.
    static let databaseNotWritable: Int32 = 5

    /// The exit status.
    let exitStatus: Int32

    init(_ error: DatabaseLockError) {
        if error.isHeldElsewhere {
            self.exitStatus = Self.databaseInUse
        } else if error.errorNumber == ENOENT || error.errorNumber == ENOTDIR {
            self.exitStatus = Self.databaseDirectoryMissing
        } else {
            self.exitStatus = Self.databaseNotWritable
        }
    }
}
