import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// A connection of its own for one of a node's writers: opened on first use, and again once it closed (the database
/// restarted, the connection was cut, a deadline passed: ``ConnectionWatch``), so a failed transaction costs one
/// error, not the writer. Connecting is bounded (``ClusterDeadlines/connect`` by default).
final class PostgresConnectionSlot: Sendable {
    private let location: PostgresLocation
    private let name: String
    private let logger: Logger
    private let connection = Mutex<PostgresConnection?>(nil)
    private let connectionIDs: Atomic<Int>
    private let connectTimeout: TimeAmount
    private let opened = Atomic<Int>(0)
    private let onReconnect: (@Sendable () -> Void)?

    /// - Parameters:
    ///   - name: Shown as the connection's `application_name` (`pg_stat_activity`).
    ///   - firstID: The id of the first connection (each new one counts up), for the driver's logs.
    ///   - connectTimeout: How long connecting may take.
    ///   - onReconnect: Called each time a connection is opened after the first (a metric).
    init(
        location: PostgresLocation, name: String, firstID: Int, connectTimeout: TimeAmount = .seconds(2),
        onReconnect: (@Sendable () -> Void)? = nil, logger: Logger
    ) {
        self.location = location
        self.name = name
        self.logger = logger
        self.connectionIDs = Atomic(firstID)
        self.connectTimeout = connectTimeout
        self.onReconnect = onReconnect
    }

    /// The open connection, connecting when there is none.
    ///
    /// - Throws: ``NodeFenced`` when the node must not write any more (``NodeLiveness/checkAlive(now:)``), asked once
    ///   the connection exists, so a node swept after the check finds that connection ended by the sweeping node.
    func open() async throws -> PostgresConnection {
        if let connection = self.connection.withLock({ $0 }), !connection.isClosed {
            try self.location.node?.checkAlive()
            return connection
        }
        var configuration = self.location.configuration(applicationName: self.name)
        configuration.options.connectTimeout = self.connectTimeout
        let opened = try await PostgresConnection.connect(
            configuration: configuration, id: self.connectionIDs.add(1, ordering: .relaxed).newValue, logger: self.logger)
        // Another open() may have connected meanwhile: keep the first open connection and close this one (dropping
        // an open connection unclosed would leak it, and postgres-nio traps on that in debug builds).
        let connection = self.connection.withLock { current -> PostgresConnection in
            if let current, !current.isClosed { return current }
            current = opened
            return opened
        }
        if connection !== opened {
            opened.closeNow()
            try self.location.node?.checkAlive()
            return connection
        }
        if self.opened.add(1, ordering: .relaxed).newValue > 1 {
            self.logger.notice("PostgreSQL connection opened again", metadata: ["connection": "\(self.name)"])
            self.onReconnect?()
        }
        try self.location.node?.checkAlive()
        return connection
    }

    /// The open connection (connecting when there is none), watched until `duration` from now: then it is closed,
    /// which fails what waits on it, and the next ``open()`` connects again. End the watch when done.
    func openWatched(for duration: Duration = ClusterDeadlines.transaction) async throws -> (PostgresConnection, ConnectionWatch) {
        let connection = try await self.open()
        return (connection, ConnectionWatch(connection, for: duration))
    }

    /// Whether there is no open connection (none yet, or the last one closed).
    var isDisconnected: Bool { self.connection.withLock { $0?.isClosed ?? true } }

    /// Forgets `connection` if it closed, so the next ``open()`` connects again.
    func forget(ifClosed connection: PostgresConnection) {
        guard connection.isClosed else { return }
        self.connection.withLock { if $0 === connection { $0 = nil } }
    }

    /// Closes `connection` (without waiting) and forgets it, so the next ``open()`` connects again: after a deadline
    /// passed or an answer never came, the connection cannot be trusted even if it looks open.
    func discard(_ connection: PostgresConnection) {
        self.connection.withLock { if $0 === connection { $0 = nil } }
        connection.closeNow()
    }

    /// Closes the connection.
    func close() async {
        let connection = self.connection.withLock { current -> PostgresConnection? in
            defer { current = nil }
            return current
        }
        try? await connection?.close()
    }
}
