import Logging
import NIOCore
import SwitchboardRedis
import SwitchboardStore
import Synchronization

/// Where a cluster's Redis server is: `HOST:PORT` (`switchboard --redis`).
public struct RedisLocation: Sendable, Hashable, CustomStringConvertible {
    /// The server's host name or address.
    public var host: String
    /// The server's port (default 6379).
    public var port: Int

    /// A location that is not `HOST[:PORT]`.
    public struct InvalidAddress: Error, CustomStringConvertible {
        public var description: String
    }

    /// A server at `host:port`.
    public init(host: String, port: Int = 6379) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST[:PORT]` (`[IPv6]:PORT` too).
    public init(address: String) throws(InvalidAddress) {
        var host = Substring(address)
        var port = 6379
        if host.hasPrefix("["), let close = host.firstIndex(of: "]") {
            let rest = host[host.index(after: close)...]
            host = host[host.index(after: host.startIndex)..<close]
            if !rest.isEmpty {
                guard rest.hasPrefix(":"), let parsed = Int(rest.dropFirst()) else {
                    throw InvalidAddress(description: "\(address) is not HOST:PORT")
                }
                port = parsed
            }
        } else if let colon = host.lastIndex(of: ":") {
            guard let parsed = Int(host[host.index(after: colon)...]) else {
                throw InvalidAddress(description: "\(address) is not HOST:PORT")
            }
            port = parsed
            host = host[..<colon]
        }
        guard !host.isEmpty, (1...65_535).contains(port) else {
            throw InvalidAddress(description: "\(address) is not HOST:PORT with a port of 1-65535")
        }
        self.host = String(host)
        self.port = port
    }

    public var description: String { self.host.contains(":") ? "[\(self.host)]:\(self.port)" : "\(self.host):\(self.port)" }
}

/// Carries change feed rows from the node that committed them to the other nodes through Redis pub/sub, so they
/// arrive without waiting for a poll of PostgreSQL and without `NOTIFY`'s commit-time lock.
///
/// The feed in PostgreSQL stays the record: a reader applies a relayed row only when it is the next one after its
/// cursor, and reads PostgreSQL when it sees a gap or when its poll interval passes, so a message Redis drops (or
/// Redis being down) delays a change, never loses it. A writer publishes after its transaction committed, in the
/// order of its own commits.
final class RedisFeedRelay: Sendable {
    /// The pub/sub channel rows travel on.
    static let channel = "switchboard:feed"

    let location: RedisLocation
    private let logger: Logger
    private let queue = SerialJobQueue()
    private let connection = Mutex<RedisConnection?>(nil)

    init(location: RedisLocation, logger: Logger) {
        self.location = location
        self.logger = logger
    }

    /// Publishes committed rows, after those published before (errors are logged; readers poll for what is lost).
    func publish(_ entries: [ChangeFeedRows.Entry]) {
        guard !entries.isEmpty else { return }
        let message = Self.encode(entries)
        self.queue.enqueue {
            do {
                let connection = try await self.open()
                _ = try await connection.send([.string(Self.channel), .bytes(message)].withVerb("PUBLISH"))
            } catch {
                self.connection.withLock { $0 = nil }
                self.logger.debug("change feed relay publish failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Closes the publishing connection.
    func close() async {
        let connection = self.connection.withLock { current -> RedisConnection? in
            defer { current = nil }
            return current
        }
        await connection?.close()
    }

    private func open() async throws -> RedisConnection {
        if let connection = self.connection.withLock({ $0 }), !connection.isClosed { return connection }
        let connection = try await RedisConnection.connect(host: self.location.host, port: self.location.port)
        self.connection.withLock { $0 = connection }
        return connection
    }

    // MARK: Message format

    /// `count` (u32), then per row: id (i64), kind (i16), node (u16 length + UTF-8), payload (u32 length + bytes).
    static func encode(_ entries: [ChangeFeedRows.Entry]) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt32(entries.count))
        for entry in entries {
            buffer.writeInteger(entry.id)
            buffer.writeInteger(entry.kind)
            buffer.writeInteger(UInt16(truncatingIfNeeded: entry.node.utf8.count))
            buffer.writeString(entry.node)
            buffer.writeInteger(UInt32(entry.payload.readableBytes))
            buffer.writeImmutableBuffer(entry.payload)
        }
        return buffer
    }

    /// The rows of a message; nil for a malformed one.
    static func decode(_ message: ByteBuffer) -> [ChangeFeedRows.Entry]? {
        var buffer = message
        guard let count = buffer.readInteger(as: UInt32.self) else { return nil }
        var entries: [ChangeFeedRows.Entry] = []
        for _ in 0..<count {
            guard let id = buffer.readInteger(as: Int64.self), let kind = buffer.readInteger(as: Int16.self),
                let nodeLength = buffer.readInteger(as: UInt16.self), let node = buffer.readString(length: Int(nodeLength)),
                let payloadLength = buffer.readInteger(as: UInt32.self),
                let payload = buffer.readSlice(length: Int(payloadLength))
            else { return nil }
            entries.append(ChangeFeedRows.Entry(id: id, node: node, kind: kind, payload: payload))
        }
        return entries
    }
}

extension Array where Element == RESPArgument {
    /// The command `verb` with these arguments.
    func withVerb(_ verb: String) -> [RESPArgument] { [.string(verb)] + self }
}
