import SwitchboardStore
import SwitchboardWire

/// A session's last will as `setWill` registered it, checked (`Protocol/SPEC.md` §13.10): the request each action
/// runs, in order, and how long after the session's end they run.
///
/// A value: it is checked once, when registered, against the limits every client request of those operations is
/// checked against; what can only be known when it runs (compare-and-set, locks, grants of a reloaded key) is checked
/// then, by the operations themselves.
struct LastWill: Sendable {
    /// At most this many actions (`batchTooLarge` beyond).
    static let maxActions = 16
    /// The longest delay, in seconds (`invalidArgument` beyond).
    static let maxDelaySeconds: UInt64 = 3_600
    /// The operations an action may run.
    static let operations: Set<Opcode> = [
        .setChannelMetadata, .updateChannelMetadata, .removeChannelMetadata, .setUserMetadata, .updateUserMetadata,
        .removeUserMetadata, .releaseLock, .publishEvent,
    ]

    /// The actions as registered (what `getWill` answers).
    let actions: [WillAction]
    /// The request each action runs, in the same order.
    let requests: [Request]
    /// Seconds between the session's end and the actions' run; 0: at once.
    let delaySeconds: UInt64

    /// Checks `body`.
    /// - Throws: The rejection `setWill` answers: `batchTooLarge`, `invalidArgument` (delay), `invalidWillAction`,
    ///   or the first argument error of an action's own operation (its message names the action).
    init(_ body: SetWillRequest, limits: StoreLimits) throws(RequestRejection) {
        guard body.actions.count <= Self.maxActions else {
            throw RequestRejection(.batchTooLarge, "a will has at most \(Self.maxActions) actions")
        }
        guard body.delaySeconds <= Self.maxDelaySeconds else {
            throw RequestRejection(.invalidArgument, "delaySeconds must be 0-\(Self.maxDelaySeconds)")
        }
        var requests: [Request] = []
        requests.reserveCapacity(body.actions.count)
        for (index, action) in body.actions.enumerated() {
            let request = try Self.request(of: action, at: index)
            try Self.check(request, at: index, limits: limits)
            requests.append(request)
        }
        self.actions = body.actions
        self.requests = requests
        self.delaySeconds = body.delaySeconds
    }

    /// The request `action` runs (the grant check of `setWill` checks these).
    /// - Throws: `invalidWillAction` when the operation cannot be part of a will or the action holds fields that
    ///   operation does not have.
    static func request(of action: WillAction, at index: Int) throws(RequestRejection) -> Request {
        func invalid(_ why: String) -> RequestRejection {
            RequestRejection(.invalidWillAction, "action \(index): \(why)")
        }
        guard action.operation < 64, let op = Opcode(rawValue: UInt8(action.operation)), Self.operations.contains(op)
        else {
            throw invalid("operation \(action.operation) cannot be part of a will")
        }
        // The fields the operation has; any other field holding a value is a mistake worth reporting.
        var allowed = WillAction(operation: action.operation)
        let request: Request
        switch op {
        case .setChannelMetadata, .updateChannelMetadata, .removeChannelMetadata:
            (allowed.channel, allowed.channelType, allowed.items) = (action.channel, action.channelType, action.items)
            (allowed.majorRevision, allowed.recordTs) = (action.majorRevision, action.recordTs)
            (allowed.recordUserId, allowed.lock) = (action.recordUserId, action.lock)
            let write = SetChannelMetadataRequest(
                channel: action.channel, channelType: action.channelType, items: action.items,
                majorRevision: action.majorRevision, recordTs: action.recordTs, recordUserId: action.recordUserId,
                lock: action.lock)
            switch op {
            case .setChannelMetadata: request = .setChannelMetadata(write)
            case .updateChannelMetadata: request = .updateChannelMetadata(write)
            default: request = .removeChannelMetadata(write)
            }
        case .setUserMetadata, .updateUserMetadata, .removeUserMetadata:
            (allowed.userId, allowed.items, allowed.majorRevision) = (action.userId, action.items, action.majorRevision)
            (allowed.recordTs, allowed.recordUserId) = (action.recordTs, action.recordUserId)
            let write = SetUserMetadataRequest(
                userId: action.userId, items: action.items, majorRevision: action.majorRevision,
                recordTs: action.recordTs, recordUserId: action.recordUserId)
            switch op {
            case .setUserMetadata: request = .setUserMetadata(write)
            case .updateUserMetadata: request = .updateUserMetadata(write)
            default: request = .removeUserMetadata(write)
            }
        case .releaseLock:
            (allowed.channel, allowed.channelType, allowed.lock) = (action.channel, action.channelType, action.lock)
            request = .releaseLock(
                ReleaseLockRequest(channel: action.channel, channelType: action.channelType, lockName: action.lock))
        default:  // .publishEvent
            (allowed.eventType, allowed.value, allowed.expirySeconds) = (action.eventType, action.value, action.expirySeconds)
            (allowed.onlineOnly, allowed.ext) = (action.onlineOnly, action.ext)
            request = .publishEvent(
                PublishEventRequest(
                    eventType: action.eventType, value: action.value, expirySeconds: action.expirySeconds,
                    onlineOnly: action.onlineOnly, multiDeviceSync: true, ext: action.ext))
        }
        guard allowed == action else {
            throw invalid("it holds fields \(op.name) does not have")
        }
        return request
    }

    /// Checks `request` (one that ``request(of:at:)`` made) as a client's request of that operation is checked
    /// before any state is read: identifiers, keys, sizes, revisions; a publish's value, expiry and `ext`.
    /// - Throws: The operation's own error, its message naming the action.
    static func check(_ request: Request, at index: Int, limits: StoreLimits) throws(RequestRejection) {
        let write: MetadataWriteRequest
        switch request {
        case .setChannelMetadata(let body), .updateChannelMetadata(let body), .removeChannelMetadata(let body):
            write = MetadataWriteRequest(
                Self.metadataOperation(request.operation), scope: .channel(body.channel, type: body.channelType),
                items: body.items, majorRevision: body.majorRevision, lock: body.lock)
        case .setUserMetadata(let body), .updateUserMetadata(let body), .removeUserMetadata(let body):
            // An empty user id is the session's user, whose id is valid: checked with a stand-in.
            write = MetadataWriteRequest(
                Self.metadataOperation(request.operation), scope: .user(body.userId.isEmpty ? "self" : body.userId),
                items: body.items, majorRevision: body.majorRevision)
        case .releaseLock(let body):
            guard limits.isValidIdentifier(body.channel), limits.isValidIdentifier(body.lockName) else {
                throw RequestRejection(
                    .identifierTooLong,
                    "action \(index): channel and lock must be 1-\(limits.maxIdentifierBytes) bytes")
            }
            return
        case .publishEvent(let body):
            do throws(SwitchboardStoreError) {
                try EventLimits.checkPublishArguments(
                    eventType: body.eventType, value: body.value, expirySeconds: body.expirySeconds, ext: body.ext)
            } catch {
                throw Self.naming(error.body, index: index)
            }
            return
        default:
            throw RequestRejection(.invalidWillAction, "action \(index): \(request.operation.name) cannot be part of a will")
        }
        if let error = write.validationError(limits: limits) { throw Self.naming(error.body, index: index) }
    }

    private static func metadataOperation(_ op: Opcode) -> MetadataOperation {
        switch op {
        case .setChannelMetadata, .setUserMetadata: .set
        case .updateChannelMetadata, .updateUserMetadata: .update
        default: .remove
        }
    }

    /// `body` with the action named in its message.
    private static func naming(_ body: ErrorBody, index: Int) -> RequestRejection {
        var named = body
        named.message = "action \(index): \(body.message)"
        return RequestRejection(named)
    }
}
