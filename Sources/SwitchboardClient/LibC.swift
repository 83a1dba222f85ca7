// The module's one use of the C library, behind one conditional import: Darwin on Apple platforms, Glibc or Musl on
// Linux. Every other file of the module stays free of platform imports (Tests/SwitchboardClientTests/
// PlatformImportTests.swift keeps it so), and the Linux build compiles the same calls Apple's SDKs declare.
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The POSIX calls and error numbers the client needs: the system's text for an error number, whether a file is
/// readable, and the socket errors ``ConnectFailure`` explains in words (their values differ between Linux and
/// Darwin, so they are read from the platform's headers, never written as numbers).
enum LibC {
    static let connectionRefused = ECONNREFUSED
    static let noSuchFile = ENOENT
    static let accessDenied = EACCES
    static let notPermitted = EPERM
    static let notADirectory = ENOTDIR
    static let timedOut = ETIMEDOUT
    static let hostUnreachable = EHOSTUNREACH
    static let networkUnreachable = ENETUNREACH
    static let addressNotAvailable = EADDRNOTAVAIL

    /// The longest Unix socket path in bytes: `sun_path` less its terminating zero (107 on Linux, 103 on Darwin).
    static let unixSocketPathLimit = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// The system's text for the error number `code`, lowercased (`connection reset by peer`).
    static func errorText(_ code: CInt) -> String {
        String(cString: strerror(code)).lowercased()
    }

    /// Nil when this process can read the file at `path`, else why not in the system's words (`no such file or
    /// directory`).
    static func whyUnreadable(_ path: String) -> String? {
        access(path, R_OK) == 0 ? nil : String(cString: strerror(errno))
    }
}
