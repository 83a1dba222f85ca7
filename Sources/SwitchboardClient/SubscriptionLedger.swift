import SwitchboardWire

/// The session-scoped subscriptions the app made through a ``SwitchboardClient``, kept so a new session can make
/// them again: channel subscriptions (with their options), user-metadata subscriptions, profile subscriptions and
/// provider registrations.
///
/// It follows the server's answers: a subscribe is recorded when it succeeds, an unsubscribe removes its entry
/// when it succeeds or the server says there was nothing to end (`4004 notSubscribed`). Event subscriptions are
/// not kept: the server keeps them for the user across sessions.
///
/// It also notes the majorRevision of the last storage event received per set, so that a new session's metadata
/// subscriptions resume from it (`sinceRevision`, `Protocol/SPEC.md` SB-13.1-8) and get the changes only.
struct SubscriptionLedger: Sendable {
    /// A metadata set's identity as storage events name it.
    struct SetID: Hashable, Sendable {
        var storageType: StorageType
        var target: String
        var channelType: ChannelType
    }

    /// A channel's identity: its name and type.
    struct ChannelID: Hashable, Sendable, Comparable {
        var name: String
        var type: ChannelType

        static func < (lhs: Self, rhs: Self) -> Bool {
            (lhs.name, lhs.type.rawValue) < (rhs.name, rhs.type.rawValue)
        }
    }

    /// Profile ids per restoring call (the server's limit per `subscribeProfiles`, §13.5).
    static let profileBatchSize = 100

    private(set) var channels: [ChannelID: SubscribeChannelRequest] = [:]
    private(set) var userMetadata: Set<String> = []
    private(set) var profileUsers: Set<String> = []
    private(set) var profileGroups: Set<String> = []
    private(set) var providerKinds: Set<ProfileKind> = []
    /// The admin change stream, with the resume point of the last change received.
    private(set) var changeStream: SubscribeChangesRequest?
    /// The session's last will, registered again on a new session (nil: none).
    private(set) var will: SetWillRequest?
    /// The majorRevision of the last storage event received per set.
    private(set) var metadataRevisions: [SetID: UInt64] = [:]
    /// Where the session stands in the server's numbering of online-only events (SB-13.4-9): a new session asks
    /// for the events after it (nil: nothing received yet, nothing to ask).
    private(set) var eventReplay: EventReplayPoint?

    /// An epoch and the greatest position received in it.
    struct EventReplayPoint: Sendable, Equatable {
        var epoch: UInt64
        var position: UInt64
    }

    /// Notes a position of the server's numbering of online-only events: in the same epoch the greater one counts,
    /// another epoch replaces it.
    mutating func noteEventPosition(epoch: UInt64, position: UInt64) {
        guard epoch != 0 else { return }
        if let current = self.eventReplay, current.epoch == epoch {
            self.eventReplay = EventReplayPoint(epoch: epoch, position: max(current.position, position))
        } else {
            self.eventReplay = EventReplayPoint(epoch: epoch, position: position)
        }
    }

    /// Notes the numbered events of a `subscribedEvents` push.
    mutating func noteEvents(_ events: [SubscribedEvent]) {
        for event in events where event.epoch != 0 {
            self.noteEventPosition(epoch: event.epoch, position: event.position)
        }
    }

    /// Notes a storage event received: a new session's subscription to its set resumes from its majorRevision.
    mutating func noteStorageEvent(_ event: StorageEvent) {
        let set = SetID(
            storageType: event.storageType, target: event.target,
            channelType: event.storageType == .channel ? event.channelType : .message)
        self.metadataRevisions[set] = event.majorRevision
    }

    /// The request that makes `subscription` again on a new session: a metadata subscription resumes from the last
    /// majorRevision received of its set (`ownUserID` names the set of a subscription to the session's own user).
    func request(for subscription: RestorableSubscription, ownUserID: String) -> Request {
        switch subscription {
        case .channel(var subscribe) where subscribe.withMetadata:
            let set = SetID(storageType: .channel, target: subscribe.channel, channelType: subscribe.channelType)
            subscribe.sinceRevision = self.metadataRevisions[set] ?? 0
            return .subscribeChannel(subscribe)
        case .userMetadata(let userID):
            let set = SetID(storageType: .user, target: userID.isEmpty ? ownUserID : userID, channelType: .message)
            return .subscribeUserMetadata(
                SubscribeUserMetadataRequest(userId: userID, sinceRevision: self.metadataRevisions[set] ?? 0))
        default:
            return subscription.request
        }
    }

    /// Notes a change received on the admin change stream: a new session resumes after it.
    mutating func noteChange(at position: UInt64) {
        guard var stream = self.changeStream else { return }
        stream.resumeFrom = max(stream.resumeFrom, position)
        self.changeStream = stream
    }

    /// Forgets a channel the server took the session out of (the `unsubscribed` push).
    mutating func forgetChannel(_ name: String, type: ChannelType) {
        self.channels[ChannelID(name: name, type: type)] = nil
    }

    /// Updates the ledger with a request's outcome.
    mutating func record(_ request: Request, outcome: Result<Response, SwitchboardClientError>) {
        let succeeded: Bool
        switch outcome {
        case .success: succeeded = true
        case .failure(let error):
            // An unsubscribe of something the session does not have leaves nothing to restore either.
            guard error.kind == .server, error.code == .notSubscribed else { return }
            succeeded = false
        }
        switch request {
        case .subscribeChannel(var subscribe) where succeeded:
            subscribe.sinceRevision = 0  // the resume point is the last event received, not this request's
            self.channels[ChannelID(name: subscribe.channel, type: subscribe.channelType)] = subscribe
        case .unsubscribeChannel(let unsubscribe):
            self.channels[ChannelID(name: unsubscribe.channel, type: unsubscribe.channelType)] = nil
            self.metadataRevisions[
                SetID(storageType: .channel, target: unsubscribe.channel, channelType: unsubscribe.channelType)] = nil
        case .subscribeUserMetadata(let subscribe) where succeeded:
            self.userMetadata.insert(subscribe.userId)
        case .unsubscribeUserMetadata(let unsubscribe):
            self.userMetadata.remove(unsubscribe.userId)
        case .subscribeProfiles(let subscribe) where succeeded:
            self.profileUsers.formUnion(subscribe.userIds)
            self.profileGroups.formUnion(subscribe.groupIds)
        case .unsubscribeProfiles(let unsubscribe) where succeeded:
            self.profileUsers.subtract(unsubscribe.userIds)
            self.profileGroups.subtract(unsubscribe.groupIds)
        case .registerProvider(let register) where succeeded:
            self.providerKinds.formUnion(register.kinds)
        case .subscribeChanges(var subscribe) where succeeded:
            guard case .success(.subscribeChanges(let answer)) = outcome else { return }
            let sameRun = self.changeStream?.resumeEpoch == answer.epoch
            let seen = sameRun ? self.changeStream?.resumeFrom ?? 0 : 0
            if subscribe.resumeEpoch == answer.epoch && !answer.gap {
                // The replay follows the answer and moves the resume point on.
                subscribe.resumeFrom = max(subscribe.resumeFrom, seen)
            } else {
                subscribe.resumeFrom = max(answer.position, seen)
            }
            subscribe.resumeEpoch = answer.epoch
            self.changeStream = subscribe
        case .unsubscribeChanges where succeeded:
            self.changeStream = nil
        case .subscribeEvent where succeeded:
            guard case .success(.subscribeEvent(let answer)) = outcome else { return }
            self.noteEventPosition(epoch: answer.epoch, position: answer.position)
        case .resumeEvents(let resume) where succeeded:
            guard case .success(.resumeEvents(let answer)) = outcome else { return }
            if answer.epoch != resume.epoch || answer.gap {
                // Start over from where the server stands (what it still replays follows, at or below it).
                self.eventReplay = nil
                self.noteEventPosition(epoch: answer.epoch, position: answer.position)
            }
            // Otherwise the replayed events follow the answer and move the point on.
        case .setWill(let will) where succeeded:
            self.will = will.actions.isEmpty ? nil : will
        default:
            break
        }
    }

    /// Stops tracking a subscription a new session refused.
    mutating func forget(_ subscription: RestorableSubscription) {
        switch subscription {
        case .channel(let subscribe):
            self.channels[ChannelID(name: subscribe.channel, type: subscribe.channelType)] = nil
        case .userMetadata(let userID):
            self.userMetadata.remove(userID)
        case .profiles(let userIDs, let groupIDs):
            self.profileUsers.subtract(userIDs)
            self.profileGroups.subtract(groupIDs)
        case .provider(let kinds):
            self.providerKinds.subtract(kinds)
        case .changes:
            self.changeStream = nil
        case .will:
            self.will = nil
        }
    }

    /// Everything to restore, in a stable order: channels, user metadata, profiles (in batches), providers, the
    /// change stream, the last will.
    var subscriptions: [RestorableSubscription] {
        var result: [RestorableSubscription] = self.channels.keys.sorted().compactMap { self.channels[$0] }
            .map { .channel($0) }
        result += self.userMetadata.sorted().map { .userMetadata(userID: $0) }
        let users = self.profileUsers.sorted()
        let groups = self.profileGroups.sorted()
        var start = 0
        while start < max(users.count, groups.count) {
            let end = start + Self.profileBatchSize
            result.append(
                .profiles(
                    userIDs: Array(users[min(start, users.count)..<min(end, users.count)]),
                    groupIDs: Array(groups[min(start, groups.count)..<min(end, groups.count)])))
            start = end
        }
        if !self.providerKinds.isEmpty {
            result.append(.provider(kinds: self.providerKinds.sorted { $0.rawValue < $1.rawValue }))
        }
        if let changeStream = self.changeStream { result.append(.changes(changeStream)) }
        if let will = self.will { result.append(.will(will)) }
        return result
    }
}

extension RestorableSubscription {
    /// The request that makes this subscription.
    var request: Request {
        switch self {
        case .channel(let subscribe): return .subscribeChannel(subscribe)
        case .userMetadata(let userID): return .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: userID))
        case .profiles(let userIDs, let groupIDs):
            return .subscribeProfiles(SubscribeProfilesRequest(userIds: userIDs, groupIds: groupIDs))
        case .provider(let kinds): return .registerProvider(RegisterProviderRequest(kinds: kinds))
        case .changes(let subscribe): return .subscribeChanges(subscribe)
        case .will(let will): return .setWill(will)
        }
    }
}
