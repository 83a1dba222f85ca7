import SwitchboardWire

/// Human-readable rendering of pushes: exactly one line per push, starting with the push's name.
public enum PushText {
    /// The line printed for a push.
    public static func line(for push: Push) -> String {
        switch push {
        case .storageEvent(let event): return Self.storage(event)
        case .lockEvent(let event): return Self.lock(event)
        case .presenceEvent(let event): return Self.presence(event)
        case .subscribedEvents(let events): return Self.subscribed(events)
        case .profileChanged(let change): return Self.profile(change)
        case .providerRequest(let request): return Self.provider(request)
        case .serverNotice(let notice): return Self.notice(notice)
        case .unsubscribed(let notice):
            var line = "unsubscribed \(Self.channelName(notice.channel, notice.channelType))"
            if !notice.reason.isEmpty { line += " reason=\(TextQuoting.quoted(notice.reason))" }
            return line
        case .change(let change): return Self.change(change)
        case .channelBroadcast(let broadcast):
            return "channelBroadcast \(Self.channelName(broadcast.channel, broadcast.channelType)) #\(broadcast.sequence)"
                + " from \(TextQuoting.quoted(broadcast.sender)) data=\(TextQuoting.quoted(broadcast.data))"
        }
    }

    /// `change #POSITION KIND ...`: one admin change-stream change, with the fields its kind sets.
    static func change(_ change: Change) -> String {
        var line = "change #\(change.position) \(change.kind)"
        if change.kind.rawValue != ChangeKind.online.rawValue && change.kind.rawValue != ChangeKind.userMetadata.rawValue {
            line += " channel \(Self.channelName(change.channel, change.channelType))"
        }
        if !change.userId.isEmpty { line += " user \(TextQuoting.quoted(change.userId))" }
        switch change.kind {
        case .online:
            line += " value=\(change.onlineValue)"
            if !change.onlineClientTypes.isEmpty {
                line += " on=[\(change.onlineClientTypes.map { "\($0)" }.joined(separator: " "))]"
            }
        case .channelMetadata, .userMetadata:
            line += " \(change.storageEventType) majorRevision=\(change.majorRevision)"
            line += ResponseText.setExpiry(change.expiresAtMs)
            if !change.author.isEmpty { line += " author=\(TextQuoting.quoted(change.author))" }
            line += Self.items(change.items, removed: change.storageEventType == .remove || change.storageEventType == .expired)
        case .lock:
            line += " \(change.lockEventType)" + Self.locks(change.locks)
        default:
            line += " totalOccupancy=\(change.totalOccupancy)"
            let states = change.states.map { TextQuoting.pair($0.key, $0.value) }
            if !states.isEmpty { line += ": " + states.joined(separator: " ") }
        }
        return line
    }

    static func channelName(_ channel: String, _ type: ChannelType) -> String {
        type == .message ? TextQuoting.quoted(channel) : "\(TextQuoting.quoted(channel))(\(type))"
    }

    static func storage(_ event: StorageEvent) -> String {
        let target = event.storageType == .channel
            ? "channel \(Self.channelName(event.target, event.channelType))"
            : "user \(TextQuoting.quoted(event.target))"
        var line = "storageEvent \(event.eventType) \(target) majorRevision=\(event.majorRevision)"
        line += ResponseText.setExpiry(event.expiresAtMs)
        if !event.publisher.isEmpty { line += " publisher=\(TextQuoting.quoted(event.publisher))" }
        if event.resumedFrom > 0 { line += " resumedFrom=\(event.resumedFrom)" }
        if event.resumeFailed { line += " resumeFailed" }
        if !event.removedKeys.isEmpty {
            line += " removed=" + event.removedKeys.map { TextQuoting.quoted($0) }.joined(separator: ",")
        }
        return line + Self.items(event.items, removed: event.eventType == .remove || event.eventType == .expired)
    }

    /// `: k=v ...` (the keys alone for a removal or an expiry), or nothing without items.
    static func items(_ items: [MetadataItem], removed: Bool) -> String {
        let parts = removed
            ? items.map { TextQuoting.quoted($0.key) }
            : items.map { TextQuoting.pair($0.key, $0.value) }
        return parts.isEmpty ? "" : ": " + parts.joined(separator: " ")
    }

    static func lock(_ event: LockEvent) -> String {
        "lockEvent \(event.eventType) \(Self.channelName(event.channel, event.channelType))" + Self.locks(event.locks)
    }

    /// `: name(owner=...) name(free) ...`, or nothing without locks.
    static func locks(_ locks: [LockDetail]) -> String {
        let parts = locks.map { lock in
            TextQuoting.quoted(lock.lockName) + (lock.owner.isEmpty ? "(free)" : "(owner=\(TextQuoting.quoted(lock.owner)))")
        }
        return parts.isEmpty ? "" : ": " + parts.joined(separator: " ")
    }

    static func presence(_ event: PresenceEvent) -> String {
        var line = "presenceEvent \(event.eventType) \(Self.channelName(event.channel, event.channelType))"
        line += " totalOccupancy=\(event.totalOccupancy)"
        if !event.publisher.isEmpty { line += " publisher=\(TextQuoting.quoted(event.publisher))" }
        if event.more { line += " more" }  // a part of a split snapshot or interval event; more parts follow
        var details: [String] = event.states.map { TextQuoting.pair($0.key, $0.value) }
        if !event.snapshot.isEmpty { details.append("members=[\(Self.users(event.snapshot))]") }
        if !event.joined.isEmpty { details.append("joined=[\(Self.ids(event.joined))]") }
        if !event.left.isEmpty { details.append("left=[\(Self.ids(event.left))]") }
        if !event.timedOut.isEmpty { details.append("timedOut=[\(Self.ids(event.timedOut))]") }
        if !event.stateChanged.isEmpty { details.append("stateChanged=[\(Self.users(event.stateChanged))]") }
        if !details.isEmpty { line += ": " + details.joined(separator: " ") }
        return line
    }

    static func users(_ users: [UserState]) -> String {
        users.map { user in
            let state = user.states.map { TextQuoting.pair($0.key, $0.value) }
            return TextQuoting.quoted(user.userId) + (state.isEmpty ? "" : "{\(state.joined(separator: " "))}")
        }.joined(separator: " ")
    }

    static func ids(_ ids: [String]) -> String { ids.map(TextQuoting.quoted).joined(separator: " ") }

    static func subscribed(_ push: SubscribedEvents) -> String {
        let events = push.events.map { event in
            var parts = [TextQuoting.quoted(event.publisher), "value=\(event.value)\(Self.onlineStateName(event.value))"]
            if event.eventType != 1 { parts.append("eventType=\(event.eventType)") }
            if !event.ext.isEmpty { parts.append("ext=\(TextQuoting.quoted(event.ext))") }
            if !event.onlineClientTypes.isEmpty {
                parts.append("online=[\(event.onlineClientTypes.map(\.description).joined(separator: " "))]")
            }
            parts.append("eventId=\(TextQuoting.quoted(event.eventId))")
            if event.epoch != 0 { parts.append("epoch=\(event.epoch) position=\(event.position)") }
            return parts.joined(separator: " ")
        }
        return "subscribedEvents " + events.joined(separator: " | ")
    }

    static func onlineStateName(_ value: UInt64) -> String {
        switch value {
        case 1: return "(login)"
        case 2: return "(logout)"
        case 3: return "(abnormal)"
        default: return ""
        }
    }

    static func profile(_ change: ProfileChanged) -> String {
        var line = "profileChanged \(change.kind) \(TextQuoting.quoted(change.id))"
        if change.removed { line += " removed" }
        if let user = change.user { line += ": " + ResponseText.userInfo(user) }
        if let group = change.group { line += ": " + ResponseText.groupInfo(group) }
        if let member = change.member { line += ": " + ResponseText.memberInfo(member) }
        if change.kind == .memberList { line += " memberCount=\(change.memberCount)" }
        return line
    }

    static func provider(_ request: ProviderRequest) -> String {
        var line = "providerRequest \(request.providerRequestId) \(request.kind) \(TextQuoting.quoted(request.id))"
        if !request.memberUserId.isEmpty { line += " member=\(TextQuoting.quoted(request.memberUserId))" }
        return line
    }

    static func notice(_ notice: ServerNotice) -> String {
        let code = ErrorCode(rawValue: UInt32(truncatingIfNeeded: notice.code))
        var line = "serverNotice \(notice.code) \(code.name)"
        if !notice.message.isEmpty { line += ": \(notice.message)" }
        if notice.atMs != 0 { line += " (at \(TextQuoting.instant(milliseconds: notice.atMs)))" }
        return line
    }
}
