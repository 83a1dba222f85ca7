import PostgresNIO

/// Whether a failed statement failed because its connection was lost, so that the transaction may be tried once more
/// on a new connection.
///
/// The connection's `isClosed` alone is not enough: when the server ends a session (`pg_terminate_backend`, a
/// restart), the statement's error can reach the caller before the channel has closed, and `isClosed` still reads
/// false for a moment.
enum ConnectionLoss {
    static func caused(_ error: any Error, on connection: PostgresConnection) -> Bool {
        connection.isClosed || Self.caused(error)
    }

    /// Whether `error` itself says the connection was lost (whatever connection it came from).
    static func caused(_ error: any Error) -> Bool {
        if error is ConnectionClosed { return true }
        guard let error = error as? PSQLError else { return false }
        switch error.code {
        case .serverClosedConnection, .connectionError, .uncleanShutdown:
            return true
        case .server:
            // Class 57P: the server shut the session down (57P01 admin_shutdown is pg_terminate_backend); class 08:
            // connection exceptions.
            let state = error.serverInfo?[.sqlState] ?? ""
            return state.hasPrefix("57P") || state.hasPrefix("08")
        default:
            return false
        }
    }
}
