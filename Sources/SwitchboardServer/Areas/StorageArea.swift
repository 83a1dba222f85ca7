import NIOCore
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// The metadata storage and lock operations (`Protocol/SPEC.md` §13.1-13.2), and their events.
///
/// Writes go to the ``MetadataStore``, which answers after the write's transaction committed (group commit);
/// the response and the storage event leave together, so subscribers never see a write that could still be
/// reverted. Events are encoded once per change and written to every subscriber.
///
/// With a store whose commits are caller-driven (``CommitDriver/caller``), the first write an event loop handles in
/// a tick schedules one commit at the end of that tick, on that loop: every write read in the tick shares the
/// transaction, and the answers go out in place, as Redis does with `appendfsync always`.
public final class StorageArea: RequestHandler, SessionObserver, ChannelMembershipObserver {
    /// Where every committed metadata change (this node's and, in a cluster, the others') and every lock event is
    /// announced to the admin change log (off until it is switched on).
    public let changeTap = ChangeTap()
    private let store: MetadataStore
    private let subscriptions: SubscriptionRegistry
    private let sessions: SessionRegistry
    private let publisher: PushPublisher
    private let nowMillis: @Sendable () -> Int64
    /// Event loops with a commit scheduled for the end of their current tick.
    private let commitsScheduled = Mutex<Set<ObjectIdentifier>>([])
    /// The store writes the webhooks of its writes and stored lock changes in their transactions: this area does not
    /// report them (`Docs/webhooks.md`).
    private let webhooksInTransactions: Bool

    /// Creates the area and routes the store's lock events to channel members that asked for them.
    ///
    /// - Parameters:
    ///   - publisher: Where storage and lock events are published; its registry holds the user-metadata
    ///     subscriptions this area keeps.
    ///   - nowMillis: The server clock (the gateway's) for the timestamps of storage event snapshots sent
    ///     outside a request (a channel join); inside one, ``RequestContext/nowMillis`` is used.
    public init(
        store: MetadataStore, publisher: PushPublisher, sessions: SessionRegistry,
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis
    ) {
        self.store = store
        self.subscriptions = publisher.subscriptions
        self.sessions = sessions
        self.publisher = publisher
        self.nowMillis = nowMillis
        let changeTap = self.changeTap
        // On a single gateway's file the store writes storage and lock webhooks in the transactions of their changes.
        let webhooksInTransactions = publisher.webhooks?.transactional.map { store.writeWebhooksInTransactions($0) } ?? false
        self.webhooksInTransactions = webhooksInTransactions
        if let webhooks = publisher.webhooks {
            // Only the changes this gateway decided: in a cluster each is reported by the node that made it. (Changes
            // whose webhooks the store wrote in their transaction do not come here.)
            store.setDecidedLockEventHandler { event in
                if let webhook = WebhookEvent.lock(event) { webhooks.record([webhook]) }
            }
        }
        store.setLockEventHandler { event in
            changeTap.emit(.lock(event))
            publisher.publish(
                .lockEvent(event), to: .channelMembers(ChannelKey(name: event.channel, type: event.channelType), receiving: .lock))
        }
        // Items past their TTL (`Protocol/SPEC.md` SB-13.1-9): an `expired` event from the server (no publisher), timed
        // when the expiry ran.
        store.setExpiryHandler { outcome in
            let event = outcome.storageEvent(publisher: "", timestampMs: UInt64(max(nowMillis(), 0)))
            if !webhooksInTransactions, let webhook = WebhookEvent.storage(event) { publisher.webhooks?.record([webhook]) }
            changeTap.emit(.storage(event))
            publisher.publish(.storageEvent(event), to: .metadataSubscribers(of: outcome.scope))
        }
        // Writes other gateways committed (a cluster's change feed) reach this gateway's subscribers the same way.
        store.setCommittedElsewhereHandler { change in
            changeTap.emit(.storage(change.storageEvent))
            publisher.publish(.storageEvent(change.storageEvent), to: .metadataSubscribers(of: change.outcome.scope))
        }
    }

    public var operations: [Opcode] {
        [
            .setChannelMetadata, .getChannelMetadata, .updateChannelMetadata, .removeChannelMetadata,
            .setUserMetadata, .getUserMetadata, .updateUserMetadata, .removeUserMetadata,
            .subscribeUserMetadata, .unsubscribeUserMetadata,
            .setLock, .acquireLock, .releaseLock, .removeLock, .revokeLock, .getLocks,
        ]
    }

    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        let caller = context.session.info.userID
        do throws(SwitchboardStoreError) {
            switch request {
            case .setChannelMetadata(let write):
                return self.writeChannel(.set, write, context) { .setChannelMetadata($0) }
            case .updateChannelMetadata(let write):
                return self.writeChannel(.update, write, context) { .updateChannelMetadata($0) }
            case .removeChannelMetadata(let write):
                return self.writeChannel(.remove, write, context) { .removeChannelMetadata($0) }
            case .getChannelMetadata(let get):
                let snapshot = try self.store.get(.channel(get.channel, type: get.channelType))
                return .response(
                    .getChannelMetadata(
                        GetChannelMetadataResponse(
                            majorRevision: snapshot.majorRevision, items: snapshot.items,
                            expiresAtMs: snapshot.expiresAtMs)))
            case .setUserMetadata(let write):
                return self.writeUser(.set, write, context) { .setUserMetadata($0) }
            case .updateUserMetadata(let write):
                return self.writeUser(.update, write, context) { .updateUserMetadata($0) }
            case .removeUserMetadata(let write):
                return self.writeUser(.remove, write, context) { .removeUserMetadata($0) }
            case .getUserMetadata(let get):
                let userID = get.userId.isEmpty ? caller : get.userId
                let snapshot = try self.store.get(.user(userID))
                return .response(
                    .getUserMetadata(
                        GetUserMetadataResponse(
                            majorRevision: snapshot.majorRevision, items: snapshot.items, userId: userID,
                            expiresAtMs: snapshot.expiresAtMs)))
            case .subscribeUserMetadata(let subscribe):
                return try self.subscribeUser(
                    subscribe.userId.isEmpty ? caller : subscribe.userId, since: subscribe.sinceRevision, context)
            case .unsubscribeUserMetadata(let unsubscribe):
                let userID = unsubscribe.userId.isEmpty ? caller : unsubscribe.userId
                guard self.subscriptions.unsubscribeUser(context.session, from: userID) else {
                    return .failure(ErrorBody(.notSubscribed, "not subscribed to \(userID)'s metadata"))
                }
                context.session.releaseSubscriptions()
                return .response(.unsubscribeUserMetadata(EmptyBody()))
            case .setLock(let lock):
                return self.changeLock(lock.channel, lock.channelType, lock.lockName, .set(ttlSeconds: lock.ttlSeconds), context) {
                    .setLock(EmptyBody())
                }
            case .acquireLock(let lock):
                let responder = context.responder
                self.store.acquireLock(
                    channel: lock.channel, channelType: lock.channelType, name: lock.lockName, userID: caller,
                    session: context.session.info.sessionID, retry: lock.retry
                ) { result in
                    switch result {
                    case .success: responder.succeed(.acquireLock(EmptyBody()))
                    case .failure(let error): responder.fail(error.body)
                    }
                }
                return .deferred
            case .releaseLock(let lock):
                return self.changeLock(lock.channel, lock.channelType, lock.lockName, .release(userID: caller), context) {
                    .releaseLock(EmptyBody())
                }
            case .removeLock(let lock):
                return self.changeLock(lock.channel, lock.channelType, lock.lockName, .remove, context) {
                    .removeLock(EmptyBody())
                }
            case .revokeLock(let lock):
                return self.changeLock(lock.channel, lock.channelType, lock.lockName, .revoke(owner: lock.owner), context) {
                    .revokeLock(EmptyBody())
                }
            case .getLocks(let get):
                let locks = try self.store.getLocks(channel: get.channel, channelType: get.channelType)
                return .response(.getLocks(GetLocksResponse(locks: locks)))
            default:
                return .failure(ErrorBody(.unavailable, "not a storage operation"))
            }
        } catch {
            return .failure(error.body)
        }
    }

    /// A lock change, answered when the store has decided it (at once on a single gateway; after the shared
    /// database committed it in a cluster).
    private func changeLock(
        _ channel: String, _ channelType: ChannelType, _ name: String, _ change: LockChange, _ context: RequestContext,
        _ response: @escaping @Sendable () -> Response
    ) -> RequestOutcome {
        let responder = context.responder
        self.store.changeLock(channel: channel, channelType: channelType, name: name, change) { result in
            switch result {
            case .success: responder.succeed(response())
            case .failure(let error): responder.fail(error.body)
            }
        }
        return .deferred
    }

    private func writeChannel(
        _ operation: MetadataOperation, _ write: SetChannelMetadataRequest, _ context: RequestContext,
        _ response: @escaping @Sendable (SetChannelMetadataResponse) -> Response
    ) -> RequestOutcome {
        let request = MetadataWriteRequest(
            operation, scope: .channel(write.channel, type: write.channelType), items: write.items,
            majorRevision: write.majorRevision, recordTs: write.recordTs, recordUserId: write.recordUserId,
            lock: write.lock, setTtlMs: write.setTtlMs)
        return self.write(request, context) {
            response(SetChannelMetadataResponse(majorRevision: $0.majorRevision, expiresAtMs: $0.expiresAtMs))
        }
    }

    private func writeUser(
        _ operation: MetadataOperation, _ write: SetUserMetadataRequest, _ context: RequestContext,
        _ response: @escaping @Sendable (SetUserMetadataResponse) -> Response
    ) -> RequestOutcome {
        // Whose metadata the caller may write was checked against its grants before the request came here
        // (`Protocol/SPEC.md` §5.10).
        let userID = write.userId.isEmpty ? context.session.info.userID : write.userId
        let request = MetadataWriteRequest(
            operation, scope: .user(userID), items: write.items, majorRevision: write.majorRevision,
            recordTs: write.recordTs, recordUserId: write.recordUserId, setTtlMs: write.setTtlMs)
        return self.write(request, context) {
            response(SetUserMetadataResponse(majorRevision: $0.majorRevision, expiresAtMs: $0.expiresAtMs))
        }
    }

    private func write(
        _ request: MetadataWriteRequest, _ context: RequestContext,
        _ response: @escaping @Sendable (WriteOutcome) -> Response
    ) -> RequestOutcome {
        let responder = context.responder
        let publisher = context.session.info.userID
        let now = UInt64(max(context.nowMillis, 0))
        self.store.write(request, caller: publisher, nowMs: now) { [self] result in
            switch result {
            case .success(let outcome):
                responder.succeed(response(outcome))
                self.publish(outcome, publisher: publisher, timestampMs: now)
            case .failure(let error):
                responder.fail(error.body)
            }
        }
        if self.store.commitsAreCallerDriven { self.scheduleCommit(on: context.session.eventLoop) }
        return .deferred
    }

    /// Commits the store's queued writes once this loop has handled everything it read in the current tick.
    private func scheduleCommit(on loop: any EventLoop) {
        let key = ObjectIdentifier(loop)
        guard self.commitsScheduled.withLock({ $0.insert(key).inserted }) else { return }
        loop.execute { [self] in
            // Writes made while this commit runs (on other loops) schedule the next one.
            self.commitsScheduled.withLock { _ = $0.remove(key) }
            self.store.commitQueuedWrites()
        }
    }

    /// Sends the write's storage event to the channel's metadata subscribers or the user's metadata subscribers;
    /// the event is built only when someone receives it.
    private func publish(_ outcome: WriteOutcome, publisher: String, timestampMs: UInt64) {
        if !self.webhooksInTransactions, let webhooks = self.publisher.webhooks,
            let event = WebhookEvent.storage(outcome.storageEvent(publisher: publisher, timestampMs: timestampMs))
        {
            webhooks.record([event])
        }
        self.changeTap.emit(.storage(outcome.storageEvent(publisher: publisher, timestampMs: timestampMs)))
        self.publisher.publish(
            .storageEvent(outcome.storageEvent(publisher: publisher, timestampMs: timestampMs)),
            to: .metadataSubscribers(of: outcome.scope))
    }

    private func subscribeUser(
        _ userID: String, since revision: UInt64, _ context: RequestContext
    ) throws(SwitchboardStoreError) -> RequestOutcome {
        let snapshot = try self.store.resume(.user(userID), from: revision)
        let session = context.session
        guard session.reserveSubscriptions() else {
            return .failure(ErrorBody(.tooManySubscriptions, "this connection has its maximum of subscriptions"))
        }
        if !self.subscriptions.subscribeUser(session, to: userID) {
            session.releaseSubscriptions()  // already subscribed: nothing new to count
        }
        session.send(.storageEvent(snapshot.storageEvent(timestampMs: UInt64(max(context.nowMillis, 0)))))
        return .response(.subscribeUserMetadata(EmptyBody()))
    }

    // MARK: ChannelMembershipObserver

    public func memberJoined(_ session: SessionHandle, channel: ChannelKey, options: ChannelOptions) {
        if options.withMetadata,
            let snapshot = try? self.store.resume(.channel(channel.name, type: channel.type), from: options.sinceRevision)
        {
            session.send(.storageEvent(snapshot.storageEvent(timestampMs: UInt64(max(self.nowMillis(), 0)))))
        }
        if options.withLock, let locks = try? self.store.lockSnapshot(channel: channel.name, channelType: channel.type) {
            session.send(.lockEvent(locks))
        }
    }

    // MARK: SessionObserver

    public func sessionStarted(_ session: SessionHandle) {
        self.store.userCameOnline(session.info.userID)
    }

    public func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        self.subscriptions.removeUserSubscriptions(of: session)
        self.store.cancelWaits(session: session.info.sessionID)
        if !self.sessions.hasSessions(ofUser: session.info.userID) {
            self.store.userWentOffline(session.info.userID)
        }
    }
}

// MARK: - Gets from the request bytes

extension StorageArea: EncodedReadHandler {
    public var encodedReadOperations: [Opcode] { [.getUserMetadata, .getChannelMetadata] }

    /// A get answered from the request body straight into the connection's output
    /// (``MetadataStore/writeGetResponse(of:userId:to:)``): no typed request, snapshot or typed response. False (the
    /// typed path answers, and reports the error) for a body the typed decoder would reject and for a name the store
    /// rejects.
    public func answerEncoded(
        _ operation: Opcode, body: ByteBuffer, session: SessionHandle, into output: inout EncodedAnswerOutput
    ) -> Bool {
        let scope: MetadataScope
        var userId: String?
        switch operation {
        case .getUserMetadata:
            guard let request = try? GetUserMetadataRequest(decoding: body) else { return false }
            let user = request.userId.isEmpty ? session.info.userID : request.userId
            scope = .user(user)
            userId = user
        case .getChannelMetadata:
            guard let request = try? GetChannelMetadataRequest(decoding: body) else { return false }
            scope = .channel(request.channel, type: request.channelType)
        default:
            return false
        }
        do {
            try self.store.writeGetResponse(of: scope, userId: userId, to: &output)
            return true
        } catch {
            return false
        }
    }
}
