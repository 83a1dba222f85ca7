import SwitchboardWire

/// The exit status of `sbctl`: a stable table that scripts may rely on (`Docs/sbctl.md`).
///
/// Statuses below 80 follow `sysexits.h`; a server error answers with `80 + its class digit` (`Protocol/SPEC.md` §9),
/// so a `5xxx` CAS conflict exits with 85 and a `4xxx` not-found with 84.
public struct ExitStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: Int32

    /// Creates a status from its number.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The command succeeded.
    public static let success = ExitStatus(rawValue: 0)
    /// The command line was wrong: unknown command or option, bad `key=value`, missing argument.
    public static let usage = ExitStatus(rawValue: 64)
    /// Input data was wrong: `call`'s JSON body, a records file, a history reference.
    public static let dataError = ExitStatus(rawValue: 65)
    /// The gateway could not be reached, or the connection was lost.
    public static let unavailable = ExitStatus(rawValue: 69)
    /// An unexpected failure inside sbctl.
    public static let software = ExitStatus(rawValue: 70)
    /// A local file (`provider serve`'s records file) could not be read.
    public static let ioError = ExitStatus(rawValue: 74)
    /// The request got no answer within `--timeout`.
    public static let timeout = ExitStatus(rawValue: 75)
    /// The gateway refused the login (GOAWAY 2000 notAuthenticated, 2001 invalidToken, 2002 tokenExpired, 2003).
    public static let loginRefused = ExitStatus(rawValue: 77)
    /// A server error whose class this version does not know.
    public static let otherServerError = ExitStatus(rawValue: 80)
    /// Server error class 1xxx: protocol.
    public static let protocolError = ExitStatus(rawValue: 81)
    /// Server error class 2xxx: auth (for example 2003 permissionDenied).
    public static let authError = ExitStatus(rawValue: 82)
    /// Server error class 3xxx: limits.
    public static let limitsError = ExitStatus(rawValue: 83)
    /// Server error class 4xxx: not found.
    public static let notFoundError = ExitStatus(rawValue: 84)
    /// Server error class 5xxx: CAS conflict.
    public static let casConflictError = ExitStatus(rawValue: 85)
    /// Server error class 6xxx: lock.
    public static let lockError = ExitStatus(rawValue: 86)
    /// Server error class 7xxx: invalid argument.
    public static let invalidArgumentError = ExitStatus(rawValue: 87)
    /// Server error class 8xxx: server.
    public static let serverError = ExitStatus(rawValue: 88)

    /// The status for a server error code: `80 + the code's class digit`.
    public static func forServerError(_ code: ErrorCode) -> ExitStatus {
        let digit = code.errorClass.rawValue
        guard (1...8).contains(digit) else { return .otherServerError }
        return ExitStatus(rawValue: 80 + Int32(digit))
    }

    /// Every status of the table with its meaning, in order (for help texts and the documentation).
    public static let table: [(status: ExitStatus, meaning: String)] = [
        (.success, "success"),
        (.usage, "usage: unknown command or option, bad argument"),
        (.dataError, "bad input data: call's JSON body, records file, history reference"),
        (.unavailable, "cannot connect, or the connection was lost"),
        (.software, "internal sbctl failure"),
        (.ioError, "a local file (records file) could not be read"),
        (.timeout, "no answer within --timeout"),
        (.loginRefused, "login refused (GOAWAY 2000-2003 during the handshake)"),
        (.otherServerError, "server error of an unknown class"),
        (.protocolError, "server error class 1xxx protocol"),
        (.authError, "server error class 2xxx auth (e.g. 2003 permissionDenied)"),
        (.limitsError, "server error class 3xxx limits"),
        (.notFoundError, "server error class 4xxx notFound"),
        (.casConflictError, "server error class 5xxx casConflict"),
        (.lockError, "server error class 6xxx lock"),
        (.invalidArgumentError, "server error class 7xxx invalidArgument"),
        (.serverError, "server error class 8xxx server"),
    ]

    public var description: String { String(self.rawValue) }
}
