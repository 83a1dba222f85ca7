import Foundation
import SwitchboardStore
import SwitchboardTestSupport
import Testing

@Suite struct DatabaseLockTests {
    /// While one lock holds a database, a second one on the same files fails naming the file; released, it can be
    /// taken again.
    @Test func aHeldDatabaseCannotBeLockedTwice() throws {
        let database = TemporaryPath("sb-dblock", suffix: ".sqlite")
        defer { database.remove() }
        var first: DatabaseLock? = try DatabaseLock(databasePath: database.path)
        #expect(first?.paths == DatabaseLock.gatewayFiles(databasePath: database.path))
        do throws(DatabaseLockError) {
            _ = try DatabaseLock(databasePath: database.path)
            Issue.record("a second lock was granted")
        } catch {
            #expect(error.isHeldElsewhere)
            #expect(error.path == database.path)
        }
        first = nil
        #expect(throws: Never.self) { _ = try DatabaseLock(databasePath: database.path) }
    }

    /// The event and profile databases are locked too: holding only one of them blocks a gateway's lock, and the
    /// failed attempt leaves no lock behind on the files it had taken.
    @Test func aSiblingFileHeldElsewhereBlocksTheWholeLock() throws {
        let database = TemporaryPath("sb-dblock", suffix: ".sqlite")
        defer { database.remove() }
        var profiles: DatabaseLock? = try DatabaseLock(paths: [database.path + ".profiles"])
        do throws(DatabaseLockError) {
            _ = try DatabaseLock(databasePath: database.path)
            Issue.record("the lock was granted while the profile database was held")
        } catch {
            #expect(error.path == database.path + ".profiles")
        }
        #expect(throws: Never.self) { _ = try DatabaseLock(paths: [database.path]) }
        profiles = nil
        _ = profiles
        #expect(throws: Never.self) { _ = try DatabaseLock(databasePath: database.path) }
    }

    /// A file that cannot be opened is reported as such, not as held by another gateway.
    @Test func anUnopenableFileIsNotReportedAsHeld() {
        do throws(DatabaseLockError) {
            _ = try DatabaseLock(paths: ["/nonexistent-directory-\(UInt32.random(in: 0...UInt32.max))/db.sqlite"])
            Issue.record("locked a file in a directory that does not exist")
        } catch {
            #expect(!error.isHeldElsewhere)
        }
    }
}
