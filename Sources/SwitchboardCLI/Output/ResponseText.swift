import SwitchboardWire

/// Human-readable rendering of responses: one fact per line, `key=value` where values are quoted when needed.
public enum ResponseText {
    /// The lines printed for a successful response.
    public static func lines(for response: Response) -> [String] {
        switch response {
        case .setChannelMetadata(let body), .updateChannelMetadata(let body), .removeChannelMetadata(let body):
            return ["majorRevision \(body.majorRevision)" + Self.setExpiry(body.expiresAtMs)]
        case .setUserMetadata(let body), .updateUserMetadata(let body), .removeUserMetadata(let body):
            return ["majorRevision \(body.majorRevision)" + Self.setExpiry(body.expiresAtMs)]
        case .getChannelMetadata(let body):
            return ["majorRevision \(body.majorRevision)" + Self.setExpiry(body.expiresAtMs)]
                + body.items.map(Self.metadataItem)
        case .getUserMetadata(let body):
            let header = body.userId.isEmpty ? "" : "user \(TextQuoting.quoted(body.userId)) "
            return ["\(header)majorRevision \(body.majorRevision)" + Self.setExpiry(body.expiresAtMs)]
                + body.items.map(Self.metadataItem)
        case .getLocks(let body):
            return body.locks.isEmpty ? ["no locks"] : body.locks.map(Self.lock)
        case .whoNow(let body):
            var lines = ["totalOccupancy \(body.totalOccupancy)"]
            lines += body.users.map(Self.userState)
            if !body.nextPage.isEmpty { lines.append("nextPage \(TextQuoting.quoted(body.nextPage))") }
            return lines
        case .whereNow(let body):
            return ["totalChannel \(body.totalChannel)"] + body.channels.map(Self.channel)
        case .getState(let body):
            return ["user \(TextQuoting.quoted(body.userId))"] + body.items.map { TextQuoting.pair($0.key, $0.value) }
        case .subscribeEvent(let body):
            let position = body.epoch == 0 ? "" : " (events epoch=\(body.epoch) position=\(body.position))"
            if body.failedPublishers.isEmpty { return ["ok" + position] }
            return ["failedPublishers " + body.failedPublishers.map(TextQuoting.quoted).joined(separator: " ") + position]
        case .resumeEvents(let body):
            var line = "events epoch=\(body.epoch) position=\(body.position)"
            if body.gap { line += " gap" }
            if body.replayed > 0 { line += " replayed=\(body.replayed)" }
            return [line]
        case .publishEvent(let body):
            return ["eventId \(TextQuoting.quoted(body.eventId)) at \(TextQuoting.instant(milliseconds: body.timestampMs))"]
        case .queryEventSubscriptions(let body):
            return body.subscriptions.isEmpty ? ["no subscriptions"] : body.subscriptions.map(Self.subscription)
        case .getUserInfo(let body):
            return body.users.map(Self.userInfo) + Self.missing(body.missing)
        case .getGroupInfo(let body):
            return body.groups.map(Self.groupInfo) + Self.missing(body.missing)
        case .getGroupMemberInfo(let body):
            return body.members.map(Self.memberInfo) + Self.missing(body.missing)
        case .updateGroupMembers(let body):
            return ["memberCount \(body.memberCount)"]
        case .getGroupMembers(let body):
            var lines = ["totalMembers \(body.totalMembers)"] + body.userIds.map(TextQuoting.quoted)
            if !body.nextPage.isEmpty { lines.append("nextPage \(TextQuoting.quoted(body.nextPage))") }
            return lines
        case .clearProfile(let body):
            return ["removed \(body.removed)"]
        case .kickUser(let body):
            var line = "sessionsEnded \(body.sessionsEnded)"
            if body.bannedUntilMs != 0 { line += " bannedUntil=\(TextQuoting.instant(milliseconds: body.bannedUntilMs))" }
            return [line]
        case .forceUnsubscribe(let body):
            return ["sessionsUnsubscribed \(body.sessionsUnsubscribed)"]
        case .revokeTokens(let body):
            return ["sessionsEnded \(body.sessionsEnded) keptUntil=\(TextQuoting.instant(milliseconds: body.keptUntilMs))"]
        case .listChannels(let body):
            var lines = body.channels.isEmpty ? ["no channels"] : body.channels.map(Self.occupancy)
            if !body.nextCursor.isEmpty { lines.append("nextCursor \(TextQuoting.quoted(body.nextCursor))") }
            return lines
        case .getLastSeen(let body):
            return body.users.map(Self.lastSeen)
        case .info(let body):
            return Self.info(body)
        case .subscribeChanges(let body):
            var line = "changes epoch=\(body.epoch) position=\(body.position)"
            if body.gap { line += " gap" }
            if body.replayed > 0 { line += " replayed=\(body.replayed)" }
            return [line]
        case .setWill(let body):
            return [body.actions == 0 ? "no will" : "will registered: \(body.actions) action(s)"]
        case .getWill(let body):
            if body.actions.isEmpty { return ["no will"] }
            let delay = body.delaySeconds == 0 ? "at once" : "after \(body.delaySeconds) s"
            return ["will of \(body.actions.count) action(s), fires \(delay)"] + body.actions.map { "  \($0.jsonValue)" }
        case .broadcast(let body):
            return ["broadcast #\(body.sequence) delivered=\(body.delivered)"]
        case .rewindBroadcasts(let body):
            var lines = body.broadcasts.map {
                "#\($0.sequence) \(TextQuoting.instant(milliseconds: $0.timestampMs)) from \(TextQuoting.quoted($0.sender)) data=\(TextQuoting.quoted($0.data))"
            }
            lines.append("latestSequence \(body.latestSequence)")
            return lines
        case .renewToken(let body):
            if body.expiresAtMs == 0 { return ["renewed (no expiry: open mode)"] }
            return ["renewed, expires \(TextQuoting.instant(milliseconds: body.expiresAtMs))"]
        case .logout, .subscribeUserMetadata, .unsubscribeUserMetadata, .setLock, .acquireLock, .releaseLock,
            .removeLock, .revokeLock, .subscribeChannel, .unsubscribeChannel, .setState, .removeState,
            .unsubscribeEvent, .setUserInfo, .setGroupInfo, .setGroupMemberInfo, .subscribeProfiles,
            .unsubscribeProfiles, .registerProvider, .answerProvider, .unsubscribeChanges:
            return ["ok"]
        }
    }

    /// ` expires=<instant>` for a set with a TTL of its own (SB-13.1-10), nothing without.
    public static func setExpiry(_ expiresAtMs: UInt64) -> String {
        expiresAtMs == 0 ? "" : " expires=\(TextQuoting.instant(milliseconds: expiresAtMs))"
    }

    /// `key=value` and, when set, the item's revision, time, author and expiry.
    public static func metadataItem(_ item: MetadataItem) -> String {
        var line = TextQuoting.pair(item.key, item.value) + "  revision=\(item.revision)"
        if item.updateTs != 0 { line += " updated=\(TextQuoting.instant(milliseconds: item.updateTs))" }
        if !item.authorUserId.isEmpty { line += " author=\(TextQuoting.quoted(item.authorUserId))" }
        if item.expiresAtMs != 0 { line += " expires=\(TextQuoting.instant(milliseconds: item.expiresAtMs))" }
        return line
    }

    static func lock(_ lock: LockDetail) -> String {
        let holder = lock.owner.isEmpty ? "free" : "owner=\(TextQuoting.quoted(lock.owner))"
        return "\(TextQuoting.quoted(lock.lockName))  \(holder) ttl=\(lock.ttlSeconds)s"
    }

    /// A user and their state: `Ann mood=happy`.
    public static func userState(_ user: UserState) -> String {
        ([TextQuoting.quoted(user.userId)] + user.states.map { TextQuoting.pair($0.key, $0.value) })
            .joined(separator: "  ")
    }

    static func channel(_ channel: ChannelRef) -> String {
        "\(TextQuoting.quoted(channel.channel))  \(channel.channelType)"
    }

    /// `"room"  message  users=2 sessions=3`.
    static func occupancy(_ row: ChannelOccupancy) -> String {
        "\(TextQuoting.quoted(row.channel))  \(row.channelType)  users=\(row.users) sessions=\(row.sessions)"
    }

    /// The statistics, one `name value` line each (aligned), then `nodes N` and a line per cluster node.
    static func info(_ body: InfoResponse) -> [String] {
        var rows: [(String, String)] = []
        if !body.nodeId.isEmpty { rows.append(("node", body.nodeId)) }
        rows += [
            ("version", body.version), ("uptime", Self.duration(milliseconds: body.uptimeMs)),
            ("connections", "\(body.connections)"), ("sessions", "\(body.sessions)"),
            ("usersOnline", "\(body.usersOnline)"), ("channels", "\(body.channels)"),
            ("memberships", "\(body.memberships)"), ("userSubscriptions", "\(body.userSubscriptions)"),
            ("metadataSets", "\(body.metadataSets)"), ("metadataItems", "\(body.metadataItems)"),
            ("writesTotal", "\(body.writesTotal)"), ("writesPerSecond", "\(body.writesPerSecond)"),
            ("writeBackQueue", "\(body.writeBackQueue)"), ("writeBackAge", "\(body.writeBackAgeMs) ms"),
        ]
        if !body.nodes.isEmpty || !body.nodeId.isEmpty { rows.append(("feedPosition", "\(body.feedPosition)")) }
        let width = rows.map(\.0.count).max() ?? 0
        var lines = rows.map { name, value in name + String(repeating: " ", count: width - name.count) + "  " + value }
        if !body.nodes.isEmpty {
            lines.append("nodes \(body.nodes.count)")
            lines += body.nodes.map(Self.clusterNode)
        }
        return lines
    }

    /// `  4f2a…  127.0.0.1:7400  alive  applied=120 lag=0 rows/0 ms  heartbeat=<instant>  (this node)`.
    static func clusterNode(_ node: ClusterNodeInfo) -> String {
        var line = "  \(node.nodeId)  \(node.address.isEmpty ? "-" : node.address)  \(node.alive ? "alive" : "NOT ALIVE")"
        line += "  applied=\(node.appliedPosition) lag=\(node.lagPositions) rows/\(node.lagMs) ms"
        line += "  heartbeat=\(TextQuoting.instant(milliseconds: node.heartbeatAtMs))"
        if node.local { line += "  (this node)" }
        return line
    }

    /// `3d 4h 5m 6s`, leaving out leading zero units (`12s`, `0s`).
    static func duration(milliseconds: UInt64) -> String {
        var seconds = milliseconds / 1000
        let days = seconds / 86_400
        seconds %= 86_400
        let parts = [(days, "d"), (seconds / 3600, "h"), (seconds % 3600 / 60, "m"), (seconds % 60, "s")]
        let shown = parts.drop { $0.0 == 0 && $0.1 != "s" }
        return shown.map { "\($0.0)\($0.1)" }.joined(separator: " ")
    }

    /// `ann  online` or `ann  lastSeen=<instant>` (`never` when never seen).
    static func lastSeen(_ row: LastSeen) -> String {
        let state = row.online
            ? "online" : row.lastSeenMs == 0 ? "never" : "lastSeen=\(TextQuoting.instant(milliseconds: row.lastSeenMs))"
        return "\(TextQuoting.quoted(row.userId))  \(state)"
    }

    static func subscription(_ subscription: EventSubscription) -> String {
        "\(TextQuoting.quoted(subscription.publisher))  eventType=\(subscription.eventType) "
            + "remaining=\(subscription.remainingSeconds)s "
            + "expires=\(TextQuoting.instant(milliseconds: subscription.expiresAtMs))"
    }

    static func userInfo(_ info: UserInfo) -> String {
        Self.record(info.userId, [("name", info.name), ("portraitUri", info.portraitUri), ("extra", info.extra)],
            updatedAtMs: info.updatedAtMs)
    }

    static func groupInfo(_ info: GroupInfo) -> String {
        Self.record(info.groupId, [("name", info.name), ("portraitUri", info.portraitUri), ("extra", info.extra)],
            updatedAtMs: info.updatedAtMs)
    }

    static func memberInfo(_ info: GroupMemberInfo) -> String {
        Self.record("\(info.groupId)/\(info.userId)", [("nickname", info.nickname), ("extra", info.extra)],
            updatedAtMs: info.updatedAtMs)
    }

    static func record(_ id: String, _ fields: [(String, String)], updatedAtMs: UInt64) -> String {
        var parts = [TextQuoting.quoted(id)]
        parts += fields.filter { !$0.1.isEmpty }.map { TextQuoting.pair($0.0, $0.1) }
        if updatedAtMs != 0 { parts.append("updated=\(TextQuoting.instant(milliseconds: updatedAtMs))") }
        return parts.joined(separator: "  ")
    }

    static func missing(_ ids: [String]) -> [String] {
        ids.isEmpty ? [] : ["missing " + ids.map(TextQuoting.quoted).joined(separator: " ")]
    }
}
