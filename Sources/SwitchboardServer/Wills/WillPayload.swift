import SwitchboardWire

/// A last will as a cluster's ``WillEngine`` stores it: JSON text with who runs it (the session's id, user, role,
/// client type, device and grants) and the `setWill` request as the spec renders it (`Protocol/SPEC.md` §10), so
/// that a node that takes a dead node's wills over runs them as their sessions would have.
enum WillPayload {
    /// The text of `will`, registered by `session`.
    static func encode(_ will: LastWill, of session: SessionInfo) -> String {
        let grants: JSONValue = session.grants.isUnrestricted ? .string("unrestricted") : session.grants.json
        let value = JSONValue.object([
            (key: "sessionId", value: .string(session.sessionID)),
            (key: "userId", value: .string(session.userID)),
            (key: "role", value: .string(session.role.rawValue)),
            (key: "clientType", value: .uint(UInt64(session.clientType.rawValue))),
            (key: "deviceId", value: .string(session.deviceID)),
            (key: "grants", value: grants),
            (key: "will", value: SetWillRequest(actions: will.actions, delaySeconds: will.delaySeconds).jsonValue),
        ])
        return value.description
    }

    /// The session and the will `text` holds; nil when it is not a payload this version wrote.
    static func decode(_ text: String) -> (session: SessionInfo, will: SetWillRequest)? {
        guard let value = try? JSONValue.parse(text),
            let sessionID = value["sessionId"]?.stringValue, let userID = value["userId"]?.stringValue,
            let role = value["role"]?.stringValue.flatMap(SessionRole.init(rawValue:)),
            let clientType = value["clientType"]?.uint64Value, let grantsValue = value["grants"],
            let willValue = value["will"], let will = try? SetWillRequest(json: willValue)
        else { return nil }
        let grants: GrantSet
        if grantsValue.stringValue == "unrestricted" {
            grants = .unrestricted
        } else if let parsed = try? GrantSet(claim: grantsValue) {
            grants = parsed
        } else {
            return nil
        }
        var session = SessionInfo(
            sessionID: sessionID, connectionID: 0, userID: userID, role: role,
            clientType: ClientType(rawValue: UInt32(truncatingIfNeeded: clientType)),
            deviceID: value["deviceId"]?.stringValue ?? "", features: [])
        session.grants = grants
        return (session, will)
    }
}
