import Foundation
import SwitchboardWire

/// The JSON answers of the inspector's API (`Docs/inspector.md` lists them), built from the wire responses.
enum InspectorJSON {
    /// `GET /inspector/api/channels`: one page of channels with their occupancy (`listChannels`).
    struct Channels: Encodable {
        struct Channel: Encodable {
            var name: String
            var type: String
            /// Distinct members (quiet ones included, as `listChannels` counts them).
            var users: UInt64
            var sessions: UInt64
        }

        var channels: [Channel]
        /// The cursor of the next page; empty on the last.
        var nextCursor: String
    }

    /// `GET /inspector/api/channel`: one page of a channel's members with their state (`whoNow`) and its metadata
    /// (`getChannelMetadata`).
    struct Channel: Encodable {
        struct Member: Encodable {
            var userId: String
            var state: [KeyValue]
        }

        var name: String
        var type: String
        /// Visible members (`whoNow`'s totalOccupancy).
        var occupancy: UInt64
        var members: [Member]
        /// The bookmark of the next page of members; empty on the last.
        var nextPage: String
        var metadata: Metadata
    }

    /// `GET /inspector/api/user`: a user's sessions on this node, whether they are online anywhere and when last seen
    /// (`getLastSeen`), their channels with their state there (`whereNow`, `getState`), and their metadata
    /// (`getUserMetadata`).
    struct User: Encodable {
        struct Session: Encodable {
            var sessionId: String
            var deviceId: String
            var clientType: String
            var startedAtMs: Int64
        }

        struct Membership: Encodable {
            var name: String
            var type: String
            var state: [KeyValue]
        }

        var userId: String
        /// Online on any node (nil without the moderation area).
        var online: Bool?
        /// When the user's last session ended (0: online or never seen; nil without the moderation area).
        var lastSeenMs: UInt64?
        /// The user's sessions on this node.
        var sessions: [Session]
        /// The channels the user is in (`whereNow`'s totalChannel).
        var totalChannels: UInt64
        /// The first ``InspectorQueries/maxUserChannels`` of them.
        var channels: [Membership]
        var metadata: Metadata
    }

    /// `GET /inspector/api/users`: one page of the users with a session on this node.
    struct Users: Encodable {
        struct User: Encodable {
            var userId: String
            var sessions: Int
            var devices: [String]
            var clientTypes: [String]
            /// When the user's earliest session here started.
            var sinceMs: Int64
        }

        /// Users with a session on this node.
        var total: Int
        var users: [User]
        /// The cursor of the next page; empty on the last.
        var nextCursor: String
    }

    /// A metadata set: its revision and items, with each item's revision, time and author.
    struct Metadata: Encodable {
        struct Item: Encodable {
            var key: String
            var value: String
            var revision: Int64
            /// The last write with recordTs (server ms); 0 otherwise.
            var updateTs: UInt64
            /// The user of the last write with recordUserId; empty otherwise.
            var authorUserId: String
        }

        var majorRevision: UInt64
        var items: [Item]

        init(majorRevision: UInt64, items: [MetadataItem]) {
            self.majorRevision = majorRevision
            self.items = items.map {
                Item(key: $0.key, value: $0.value, revision: $0.revision, updateTs: $0.updateTs, authorUserId: $0.authorUserId)
            }
        }
    }

    /// A presence state item.
    struct KeyValue: Encodable {
        var key: String
        var value: String

        init(_ item: StateItem) {
            self.key = item.key
            self.value = item.value
        }
    }

    /// Every error: `{"error":{"code":7000,"name":"invalidArgument","message":"…"}}`.
    struct Failure: Encodable {
        struct Body: Encodable {
            var code: UInt64
            var name: String
            var message: String
        }

        var error: Body

        init(_ body: ErrorBody) {
            self.error = Body(code: body.code, name: body.errorCode.name, message: body.message)
        }
    }

    /// The channel type's name in the API: `message` or `stream`.
    static func typeName(_ type: ChannelType) -> String {
        type.name ?? "\(type.rawValue)"
    }

    /// `value` as compact JSON.
    static func encode(_ value: some Encodable) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(value)) ?? Data(#"{"error":{"code":8000,"name":"internal","message":"encoding"}}"#.utf8))
    }
}
