import NIOCore
import SwitchboardWire

/// The inspector's reads: each runs typed requests through the command areas (``InternalCaller``) as the inspecting
/// admin, so that limits, cursors and errors are the wire operations' own, and a cluster node answers with the
/// cluster's channels, members and metadata. Only the list of online users is this node's own (no operation lists
/// them): it comes from the node's ``SessionRegistry``.
struct InspectorQueries: Sendable {
    /// The channels of a user the user answer reports the state in (`getState` each).
    static let maxUserChannels = 100
    /// Users per page of the online list by default, and at most.
    static let defaultUserPage = 50
    static let maxUserPage = 100
    /// Channels per page by default (`listChannels` allows 1-100).
    static let defaultChannelPage = 50

    let caller: InternalCaller
    let sessions: SessionRegistry
    let session: SessionInfo
    let eventLoop: any EventLoop

    private func call(_ request: Request) async throws(InternalCallError) -> Response {
        do {
            return try await self.caller.call(request, as: self.session, on: self.eventLoop).get()
        } catch let error as InternalCallError {
            throw error
        } catch {
            throw InternalCallError(ErrorBody(.internal, "\(error)"))
        }
    }

    /// `channels?type=message|stream&prefix=P&cursor=C&limit=N`: `listChannels`.
    func channels(_ query: InspectorQueryString) async throws(InternalCallError) -> InspectorJSON.Channels {
        let type = query["type"].isEmpty ? ChannelType(rawValue: 0) : try Self.channelType(query["type"])
        let limit = try query.integer("limit", default: Self.defaultChannelPage)
        let request = ListChannelsRequest(
            channelType: type, prefix: query["prefix"], cursor: query["cursor"], limit: UInt64(clamping: max(0, limit)))
        guard case .listChannels(let answer) = try await self.call(.listChannels(request)) else { throw Self.unexpected }
        return InspectorJSON.Channels(
            channels: answer.channels.map {
                .init(name: $0.channel, type: InspectorJSON.typeName($0.channelType), users: $0.users, sessions: $0.sessions)
            },
            nextCursor: answer.nextCursor)
    }

    /// `channel?name=N&type=message|stream&page=P`: `whoNow` with user ids and states, and `getChannelMetadata`.
    func channel(_ query: InspectorQueryString) async throws(InternalCallError) -> InspectorJSON.Channel {
        let name = try query.required("name")
        let type = query["type"].isEmpty ? ChannelType.message : try Self.channelType(query["type"])
        let who = WhoNowRequest(channel: name, channelType: type, includeUserId: true, includeState: true, page: query["page"])
        guard case .whoNow(let members) = try await self.call(.whoNow(who)) else { throw Self.unexpected }
        let get = GetChannelMetadataRequest(channel: name, channelType: type)
        guard case .getChannelMetadata(let metadata) = try await self.call(.getChannelMetadata(get)) else {
            throw Self.unexpected
        }
        return InspectorJSON.Channel(
            name: name, type: InspectorJSON.typeName(type), occupancy: members.totalOccupancy,
            members: members.users.map { .init(userId: $0.userId, state: $0.states.map(InspectorJSON.KeyValue.init)) },
            nextPage: members.nextPage,
            metadata: InspectorJSON.Metadata(majorRevision: metadata.majorRevision, items: metadata.items))
    }

    /// `user?id=U`: the user's sessions here, `getLastSeen`, `whereNow` and `getState` in each channel (the first
    /// ``maxUserChannels``), `getUserMetadata`.
    func user(_ query: InspectorQueryString) async throws(InternalCallError) -> InspectorJSON.User {
        let userID = try query.required("id")
        guard case .whereNow(let whereNow) = try await self.call(.whereNow(WhereNowRequest(userId: userID))) else {
            throw Self.unexpected
        }
        guard case .getUserMetadata(let metadata) = try await self.call(.getUserMetadata(GetUserMetadataRequest(userId: userID)))
        else { throw Self.unexpected }
        var memberships: [InspectorJSON.User.Membership] = []
        for ref in whereNow.channels.prefix(Self.maxUserChannels) {
            // A state the caller may not see (a quiet member) or one gone since whereNow reads as none.
            let state = try? await self.call(
                .getState(GetStateRequest(channel: ref.channel, channelType: ref.channelType, userId: userID)))
            let items: [StateItem] = if case .getState(let found) = state { found.items } else { [] }
            memberships.append(
                .init(name: ref.channel, type: InspectorJSON.typeName(ref.channelType), state: items.map(InspectorJSON.KeyValue.init)))
        }
        // Online anywhere and last seen: the moderation area's answer, where it runs.
        var online: Bool?
        var lastSeenMs: UInt64?
        if case .getLastSeen(let seen)? = try? await self.call(.getLastSeen(GetLastSeenRequest(userIds: [userID]))),
            let entry = seen.users.first
        {
            online = entry.online
            lastSeenMs = entry.lastSeenMs
        }
        let sessions = self.sessions.sessions(ofUser: userID).map(\.info).sorted { $0.startedAtMs < $1.startedAtMs }
        return InspectorJSON.User(
            userId: userID, online: online, lastSeenMs: lastSeenMs,
            sessions: sessions.map {
                .init(
                    sessionId: $0.sessionID, deviceId: $0.deviceID, clientType: $0.clientType.name ?? "\($0.clientType.rawValue)",
                    startedAtMs: $0.startedAtMs)
            },
            totalChannels: whereNow.totalChannel, channels: memberships,
            metadata: InspectorJSON.Metadata(majorRevision: metadata.majorRevision, items: metadata.items))
    }

    /// `users?cursor=C&limit=N`: the users with a session on this node, in user-id order (the cursor is the last user
    /// id of the page before).
    func users(_ query: InspectorQueryString) throws(InternalCallError) -> InspectorJSON.Users {
        let limit = try query.integer("limit", default: Self.defaultUserPage)
        guard (1...Self.maxUserPage).contains(limit) else {
            throw InternalCallError(ErrorBody(.invalidArgument, "limit is 1-\(Self.maxUserPage)"))
        }
        let cursor = query["cursor"]
        let (page, more) = self.sessions.onlineUsers(after: cursor.isEmpty ? nil : cursor, limit: limit)
        return InspectorJSON.Users(
            total: self.sessions.onlineUserCount,
            users: page.map { user in
                let infos = user.sessions.map(\.info)
                return .init(
                    userId: user.userID, sessions: infos.count, devices: Array(Set(infos.map(\.deviceID))).sorted(),
                    clientTypes: Array(Set(infos.map { $0.clientType.name ?? "\($0.clientType.rawValue)" })).sorted(),
                    sinceMs: infos.map(\.startedAtMs).min() ?? 0)
            },
            nextCursor: more ? page.last?.userID ?? "" : "")
    }

    private static let unexpected = InternalCallError(ErrorBody(.internal, "an area answered with another operation"))

    /// `message`, `stream`, `1` or `2`.
    static func channelType(_ text: String) throws(InternalCallError) -> ChannelType {
        switch text {
        case "message", "1": return .message
        case "stream", "2": return .stream
        default: throw InternalCallError(ErrorBody(.invalidArgument, "type is message or stream"))
        }
    }
}
