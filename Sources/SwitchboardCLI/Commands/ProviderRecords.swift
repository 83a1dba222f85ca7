import SwitchboardWire

/// The records a `provider serve` answers from, read from a JSON file:
///
/// ```json
/// {"users": [{"userId": "Bob", "name": "Bob"}], "groups": [{"groupId": "g1", "name": "Team"}],
///  "members": [{"groupId": "g1", "userId": "Bob", "nickname": "B"}], "memberLists": {"g1": ["Bob", "Ann"]}}
/// ```
///
/// Records use the spec's canonical JSON rendering of `UserInfo`, `GroupInfo` and `GroupMemberInfo`.
public struct ProviderRecords: Sendable, Equatable {
    public var users: [String: UserInfo] = [:]
    public var groups: [String: GroupInfo] = [:]
    public var members: [String: GroupMemberInfo] = [:]
    public var memberLists: [String: [String]] = [:]

    /// No records.
    public init() {}

    /// Reads the records file's JSON text.
    public init(jsonText: String) throws(CommandFailure) {
        let json: JSONValue
        do {
            json = try JSONValue.parse(jsonText)
        } catch {
            throw .dataError("the records file is not JSON: \(error)")
        }
        guard case .object(let members) = json else { throw .dataError("the records file must hold a JSON object") }
        do {
            for (key, value) in members {
                switch key {
                case "users":
                    for element in try JSONField.array(value, key) {
                        let user = try UserInfo(json: element)
                        self.users[user.userId] = user
                    }
                case "groups":
                    for element in try JSONField.array(value, key) {
                        let group = try GroupInfo(json: element)
                        self.groups[group.groupId] = group
                    }
                case "members":
                    for element in try JSONField.array(value, key) {
                        let member = try GroupMemberInfo(json: element)
                        self.members[Self.memberKey(member.groupId, member.userId)] = member
                    }
                case "memberLists":
                    for (groupId, list) in try JSONField.object(value, key) {
                        self.memberLists[groupId] = try JSONField.array(list, groupId).map {
                            (element: JSONValue) throws(SwitchboardWireError) -> String in
                            try JSONField.string(element, groupId)
                        }
                    }
                default:
                    throw CommandFailure.dataError("unknown member '\(key)' in the records file (users, groups, members, memberLists)")
                }
            }
        } catch let error as CommandFailure {
            throw error
        } catch let error as SwitchboardWireError {
            throw .dataError("bad record in the records file: \(error.message)")
        } catch {
            throw .dataError("bad records file: \(error)")
        }
    }

    static func memberKey(_ groupId: String, _ userId: String) -> String { groupId + "\u{0}" + userId }

    /// The kinds these records can answer.
    public var kinds: [ProfileKind] {
        var kinds: [ProfileKind] = []
        if !self.users.isEmpty { kinds.append(.user) }
        if !self.groups.isEmpty { kinds.append(.group) }
        if !self.members.isEmpty { kinds.append(.groupMember) }
        if !self.memberLists.isEmpty { kinds.append(.memberList) }
        return kinds
    }

    /// The answer to a provider request: the record when known, else `found` false.
    public func answer(_ request: ProviderRequest) -> AnswerProviderRequest {
        var answer = AnswerProviderRequest(providerRequestId: request.providerRequestId)
        switch request.kind {
        case .user:
            answer.user = self.users[request.id]
            answer.found = answer.user != nil
        case .group:
            answer.group = self.groups[request.id]
            answer.found = answer.group != nil
        case .groupMember:
            answer.member = self.members[Self.memberKey(request.id, request.memberUserId)]
            answer.found = answer.member != nil
        case .memberList:
            if let list = self.memberLists[request.id] {
                answer.memberUserIds = list
                answer.found = true
            }
        default:
            break
        }
        return answer
    }
}
