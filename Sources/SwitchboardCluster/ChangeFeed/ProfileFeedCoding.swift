import NIOCore
import SwitchboardStore
import SwitchboardWire

/// What a `.profile` change feed row carries.
enum ProfileFeedMessage: Sendable {
    /// A committed change of the directory's records (never ``ProfileReplicatedChange/providers(_:present:)``).
    case change(ProfileReplicatedChange)
    /// `node`'s session became the provider of `kinds` (`present`), or `node`'s provider of `kinds` went away.
    case providers(node: String, kinds: [ProfileKind], present: Bool)
    /// Node `from` asks node `to`'s provider; the answer comes back as ``answered(to:askID:)`` with
    /// `request.providerRequestId`.
    case request(to: String, from: String, ProviderRequest)
    /// Node `to`'s forwarded ask `askID` is answered (what the provider found was fed before this row).
    case answered(to: String, askID: UInt64)
}

/// A ``ProfileFeedMessage`` as a change feed payload: the commit's version (8 bytes, big-endian; ordered as the
/// commits), a tag byte, then the message's fields (texts and lists length-prefixed by a 4-byte count, records in
/// their wire encoding, length-prefixed).
enum ProfileFeedCoding {
    private enum Tag: UInt8 {
        case user = 1, group, member, removeUsers, removeGroups, removeMembers, memberList, removeMemberLists
        case providers, request, answered
    }

    static func encode(_ message: ProfileFeedMessage, version: Int64) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(version)
        switch message {
        case .change(let change):
            switch change {
            case .user(let info):
                buffer.writeInteger(Tag.user.rawValue)
                buffer.writeRecord(info)
            case .group(let info):
                buffer.writeInteger(Tag.group.rawValue)
                buffer.writeRecord(info)
            case .member(let info):
                buffer.writeInteger(Tag.member.rawValue)
                buffer.writeRecord(info)
            case .removeUsers(let ids):
                buffer.writeInteger(Tag.removeUsers.rawValue)
                buffer.writeTexts(ids)
            case .removeGroups(let ids):
                buffer.writeInteger(Tag.removeGroups.rawValue)
                buffer.writeTexts(ids)
            case .removeMembers(let keys):
                buffer.writeInteger(Tag.removeMembers.rawValue)
                buffer.writeTexts(keys.map { $0.flatMap { [$0.group, $0.user] } })
            case .memberList(let group, let members):
                buffer.writeInteger(Tag.memberList.rawValue)
                buffer.writeText(group)
                buffer.writeTexts(members)
            case .removeMemberLists(let groups):
                buffer.writeInteger(Tag.removeMemberLists.rawValue)
                buffer.writeTexts(groups)
            case .providers:
                preconditionFailure("provider changes are fed as .providers(node:kinds:present:)")
            }
        case .providers(let node, let kinds, let present):
            buffer.writeInteger(Tag.providers.rawValue)
            buffer.writeText(node)
            buffer.writeInteger(UInt8(present ? 1 : 0))
            buffer.writeInteger(UInt32(kinds.count))
            for kind in kinds { buffer.writeInteger(kind.rawValue) }
        case .request(let to, let from, let request):
            buffer.writeInteger(Tag.request.rawValue)
            buffer.writeText(to)
            buffer.writeText(from)
            buffer.writeRecord(request)
        case .answered(let to, let askID):
            buffer.writeInteger(Tag.answered.rawValue)
            buffer.writeText(to)
            buffer.writeInteger(askID)
        }
        return buffer
    }

    static func decode(_ payload: ByteBuffer) throws -> (version: Int64, message: ProfileFeedMessage) {
        var buffer = payload
        guard let version = buffer.readInteger(as: Int64.self), let raw = buffer.readInteger(as: UInt8.self),
            let tag = Tag(rawValue: raw)
        else { throw Self.malformed }
        let message: ProfileFeedMessage
        switch tag {
        case .user: message = .change(.user(try buffer.readRecord(UserInfo.self)))
        case .group: message = .change(.group(try buffer.readRecord(GroupInfo.self)))
        case .member: message = .change(.member(try buffer.readRecord(GroupMemberInfo.self)))
        case .removeUsers: message = .change(.removeUsers(try buffer.readTexts()))
        case .removeGroups: message = .change(.removeGroups(try buffer.readTexts()))
        case .removeMembers:
            let keys = try buffer.readTexts().map { texts in
                stride(from: 0, to: texts.count - 1, by: 2).map { (group: texts[$0], user: texts[$0 + 1]) }
            }
            message = .change(.removeMembers(keys))
        case .memberList:
            let group = try buffer.readText()
            message = .change(.memberList(group: group, members: try buffer.readTexts() ?? []))
        case .removeMemberLists: message = .change(.removeMemberLists(try buffer.readTexts()))
        case .providers:
            let node = try buffer.readText()
            guard let present = buffer.readInteger(as: UInt8.self), let count = buffer.readInteger(as: UInt32.self),
                count <= 16
            else { throw Self.malformed }
            var kinds: [ProfileKind] = []
            for _ in 0..<count {
                guard let kind = buffer.readInteger(as: UInt32.self) else { throw Self.malformed }
                kinds.append(ProfileKind(rawValue: kind))
            }
            message = .providers(node: node, kinds: kinds, present: present == 1)
        case .request:
            let to = try buffer.readText()
            let from = try buffer.readText()
            message = .request(to: to, from: from, try buffer.readRecord(ProviderRequest.self))
        case .answered:
            let to = try buffer.readText()
            guard let askID = buffer.readInteger(as: UInt64.self) else { throw Self.malformed }
            message = .answered(to: to, askID: askID)
        }
        return (version, message)
    }

    static var malformed: SwitchboardWireError {
        SwitchboardWireError(.malformedBody, "malformed profile change feed row")
    }
}

extension ByteBuffer {
    fileprivate mutating func writeText(_ text: String) {
        self.writeInteger(UInt32(text.utf8.count))
        self.writeString(text)
    }

    /// A flag byte (0: nil), then the count and the texts.
    fileprivate mutating func writeTexts(_ texts: [String]?) {
        guard let texts else {
            self.writeInteger(UInt8(0))
            return
        }
        self.writeInteger(UInt8(1))
        self.writeInteger(UInt32(texts.count))
        for text in texts { self.writeText(text) }
    }

    fileprivate mutating func writeRecord<Record: WireCodable>(_ record: Record) {
        var body = ByteBuffer()
        record.encode(into: &body)
        self.writeInteger(UInt32(body.readableBytes))
        self.writeBuffer(&body)
    }

    fileprivate mutating func readText() throws -> String {
        guard let count = self.readInteger(as: UInt32.self), let text = self.readString(length: Int(count)) else {
            throw ProfileFeedCoding.malformed
        }
        return text
    }

    fileprivate mutating func readTexts() throws -> [String]? {
        guard let flag = self.readInteger(as: UInt8.self) else { throw ProfileFeedCoding.malformed }
        guard flag == 1 else { return nil }
        guard let count = self.readInteger(as: UInt32.self), Int(count) <= self.readableBytes / 4 else {
            throw ProfileFeedCoding.malformed
        }
        var texts: [String] = []
        texts.reserveCapacity(Int(count))
        for _ in 0..<count { texts.append(try self.readText()) }
        return texts
    }

    fileprivate mutating func readRecord<Record: WireCodable>(_: Record.Type) throws -> Record {
        guard let body = self.readLengthPrefixedSlice(as: UInt32.self) else { throw ProfileFeedCoding.malformed }
        return try Record(decoding: body)
    }
}
