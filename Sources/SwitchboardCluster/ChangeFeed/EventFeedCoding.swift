import NIOCore
import PostgresNIO
import Logging
import SwitchboardStore
import SwitchboardWire

/// A ``SharedEventChange`` as the payload of an `.event` change feed row: a tag byte, then
///
/// - 1 subscribed: its version (Int64), a count (UInt32), then per subscription subscriber, publisher (strings),
///   event type (UInt64), subscribed-at and expires-at (Int64, server ms);
/// - 2 unsubscribed: its version (Int64), subscriber, then 0 (all) or 1 and a count and the publishers;
/// - 3 published: flags (1 kept, 2 multi-device sync), then the event's wire body (`SubscribedEvent`);
/// - 4 online state: its version (Int64), then the event's wire body;
/// - 5 login sync: node, user (strings), session (UInt64), since (Int64, server ms).
///
/// Strings are a UInt32 byte count and their UTF-8 bytes; integers big-endian.
enum EventFeedCoding {
    static func encode(_ change: SharedEventChange) -> ByteBuffer {
        var buffer = ByteBuffer()
        switch change {
        case .subscribed(let subscriptions, let version):
            buffer.writeInteger(UInt8(1))
            buffer.writeInteger(version)
            buffer.writeInteger(UInt32(subscriptions.count))
            for s in subscriptions {
                buffer.writeFeedString(s.subscriber)
                buffer.writeFeedString(s.publisher)
                buffer.writeInteger(s.eventType)
                buffer.writeInteger(s.subscribedAtMs)
                buffer.writeInteger(s.expiresAtMs)
            }
        case .unsubscribed(let subscriber, let publishers, let version):
            buffer.writeInteger(UInt8(2))
            buffer.writeInteger(version)
            buffer.writeFeedString(subscriber)
            if let publishers {
                buffer.writeInteger(UInt8(1))
                buffer.writeInteger(UInt32(publishers.count))
                for publisher in publishers { buffer.writeFeedString(publisher) }
            } else {
                buffer.writeInteger(UInt8(0))
            }
        case .published(let event, let kept, let multiDeviceSync):
            buffer.writeInteger(UInt8(3))
            buffer.writeInteger(UInt8((kept ? 1 : 0) | (multiDeviceSync ? 2 : 0)))
            event.encode(into: &buffer)
        case .onlineState(let event, let version):
            buffer.writeInteger(UInt8(4))
            buffer.writeInteger(version)
            event.encode(into: &buffer)
        case .loginSync(let node, let user, let session, let since):
            buffer.writeInteger(UInt8(5))
            buffer.writeFeedString(node)
            buffer.writeFeedString(user)
            buffer.writeInteger(session)
            buffer.writeInteger(since)
        }
        return buffer
    }

    static func decode(_ payload: ByteBuffer) throws -> SharedEventChange {
        var buffer = payload
        guard let tag = buffer.readInteger(as: UInt8.self) else { throw Self.malformed }
        switch tag {
        case 1:
            guard let version = buffer.readInteger(as: Int64.self), let count = buffer.readInteger(as: UInt32.self) else {
                throw Self.malformed
            }
            var subscriptions: [StoredEventSubscription] = []
            for _ in 0..<count {
                let subscriber = try Self.readString(&buffer)
                let publisher = try Self.readString(&buffer)
                guard let eventType = buffer.readInteger(as: UInt64.self),
                    let subscribedAt = buffer.readInteger(as: Int64.self),
                    let expiresAt = buffer.readInteger(as: Int64.self)
                else { throw Self.malformed }
                subscriptions.append(
                    StoredEventSubscription(
                        subscriber: subscriber, publisher: publisher, eventType: eventType, subscribedAtMs: subscribedAt,
                        expiresAtMs: expiresAt))
            }
            return .subscribed(subscriptions, version: version)
        case 2:
            guard let version = buffer.readInteger(as: Int64.self) else { throw Self.malformed }
            let subscriber = try Self.readString(&buffer)
            guard let hasList = buffer.readInteger(as: UInt8.self) else { throw Self.malformed }
            guard hasList == 1 else { return .unsubscribed(subscriber: subscriber, publishers: nil, version: version) }
            guard let count = buffer.readInteger(as: UInt32.self) else { throw Self.malformed }
            var publishers: [String] = []
            for _ in 0..<count { publishers.append(try Self.readString(&buffer)) }
            return .unsubscribed(subscriber: subscriber, publishers: publishers, version: version)
        case 3:
            guard let flags = buffer.readInteger(as: UInt8.self) else { throw Self.malformed }
            let event = try SubscribedEvent(decoding: buffer)
            return .published(event, kept: flags & 1 != 0, multiDeviceSync: flags & 2 != 0)
        case 4:
            guard let version = buffer.readInteger(as: Int64.self) else { throw Self.malformed }
            return .onlineState(try SubscribedEvent(decoding: buffer), version: version)
        case 5:
            let node = try Self.readString(&buffer)
            let user = try Self.readString(&buffer)
            guard let session = buffer.readInteger(as: UInt64.self), let since = buffer.readInteger(as: Int64.self) else {
                throw Self.malformed
            }
            return .loginSync(node: node, user: user, session: session, sinceMs: since)
        default:
            throw Self.malformed
        }
    }

    private static var malformed: SwitchboardWireError {
        SwitchboardWireError(.malformedBody, "malformed event change feed row")
    }


    private static func readString(_ buffer: inout ByteBuffer) throws -> String {
        guard let string = buffer.readFeedString() else { throw Self.malformed }
        return string
    }
}

/// `.event` rows: applied to this node's event domain, which delivers their events to this node's sessions.
struct EventFeedConsumer: ChangeFeedConsumer {
    let backend: PostgresEventBackend

    func consume(_ payload: ByteBuffer, on connection: PostgresConnection, logger: Logger) async throws {
        self.backend.applyFromFeed(try EventFeedCoding.decode(payload))
    }
}
