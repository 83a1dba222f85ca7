import NIOCore
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// Channel broadcasts (`Protocol/SPEC.md` §13.11): `broadcast`, `rewindBroadcasts` and the `channelBroadcast` push.
///
/// An ephemeral message goes to the sessions subscribed to the channel now (the ``SubscriptionRegistry`` the
/// presence area fills), never to disk. Each channel's recent broadcasts are kept in memory in a ``RewindRing``
/// (bounded by ``BroadcastConfiguration/rewindCount`` and ``BroadcastConfiguration/rewindSeconds``; a channel whose
/// newest broadcast has aged out is dropped by a sweep every few seconds). Sequences come from one node-wide counter
/// that starts at the node's start time in microseconds, so they increase per channel across the node's restarts.
///
/// Order: a broadcast takes its sequence, enters the ring, is queued to its receivers' event loops and handed to the
/// cluster's relay under one lock, so every receiver (and every other node) gets a channel's broadcasts in sequence
/// order.
public final class BroadcastArea: RequestHandler, SessionObserver, RelayedBroadcastReceiver {
    private struct State {
        var nextSequence: UInt64
        var rings: [ChannelKey: RewindRing] = [:]
        var buckets: [ObjectIdentifier: TokenBucket] = [:]
    }

    /// The limits in use.
    public let configuration: BroadcastConfiguration
    private let publisher: PushPublisher
    private let relay: (any BroadcastRelay)?
    private let nowMillis: @Sendable () -> Int64
    private let state: Mutex<State>

    public var operations: [Opcode] { [.broadcast, .rewindBroadcasts] }

    /// Creates the area.
    ///
    /// - Parameters:
    ///   - configuration: payload size, rate and rewind limits.
    ///   - publisher: where pushes go; its registry holds the channels' members.
    ///   - relay: on a cluster node, where accepted broadcasts go to the other nodes.
    ///   - sweepLoop: where the sweep of idle channels runs (nil: none; rings are still trimmed when written).
    ///   - nowMillis: the clock for timestamps and ages.
    public init(
        configuration: BroadcastConfiguration = BroadcastConfiguration(), publisher: PushPublisher,
        relay: (any BroadcastRelay)? = nil, sweepLoop: (any EventLoop)? = nil,
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis
    ) {
        self.configuration = configuration
        self.publisher = publisher
        self.relay = relay
        self.nowMillis = nowMillis
        self.state = Mutex(State(nextSequence: UInt64(max(nowMillis(), 0)) &* 1000 &+ 1))
        if let sweepLoop {
            let interval = TimeAmount.seconds(Int64(min(max(configuration.rewindSeconds / 4, 1), 30)))
            sweepLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { [weak self] task in
                guard let self else { return task.cancel() }
                self.sweep()
            }
        }
    }

    /// How many channels have broadcasts kept in memory.
    public var channelsKept: Int { self.state.withLock { $0.rings.count } }

    /// How many sessions have a broadcast rate of their own in memory (one per client session that broadcast, until
    /// it ends; never the HTTP API's callers, which have no session).
    public var sessionsRateLimited: Int { self.state.withLock { $0.buckets.count } }

    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        do throws(RequestRejection) {
            switch request {
            case .broadcast(let body): return .response(.broadcast(try self.broadcast(body, context: context)))
            case .rewindBroadcasts(let body): return .response(.rewindBroadcasts(try self.rewind(body, context: context)))
            default: return .failure(ErrorBody(.unavailable, "\(request.operation.name) is not a broadcast operation"))
            }
        } catch {
            return .failure(error.body)
        }
    }

    public func sessionStarted(_ session: SessionHandle) {}

    public func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        _ = self.state.withLock { $0.buckets.removeValue(forKey: ObjectIdentifier(session)) }
    }

    // MARK: operations

    private func broadcast(_ request: BroadcastRequest, context: RequestContext) throws(RequestRejection) -> BroadcastResponse {
        let key = try Self.channelKey(request.channel, request.channelType)
        guard request.data.utf8.count <= self.configuration.maxDataBytes else {
            throw RequestRejection(
                .broadcastTooLarge, "a broadcast's data is at most \(self.configuration.maxDataBytes) bytes")
        }
        let session = context.session
        let now = UInt64(max(context.nowMillis, 0))
        let configuration = self.configuration
        let publisher = self.publisher
        let relay = self.relay
        // A caller inside the gateway (the HTTP API's backends) has no session to limit, and no end that would drop
        // its bucket: the per-session rate is a client's (SB-13.11-9).
        let limited = !session.isInternalCaller
        let outcome: Result<(push: ChannelBroadcast, delivered: Int), RequestRejection> = self.state.withLock { state in
            if limited {
                let id = ObjectIdentifier(session)
                var bucket = state.buckets[id]
                    ?? TokenBucket(rate: configuration.ratePerSecond, burst: configuration.burst, now: .now())
                let wait = bucket.take(now: .now())
                state.buckets[id] = bucket
                if let wait {
                    var body = ErrorBody(.broadcastRateLimited, "over \(configuration.ratePerSecond) broadcasts a second")
                    body.retryAfterMs = UInt64(max(wait.nanoseconds / 1_000_000, 1))
                    return .failure(RequestRejection(body))
                }
            }
            let push = ChannelBroadcast(
                channel: key.name, channelType: key.type, sequence: state.nextSequence, sender: session.info.userID,
                data: request.data, timestampMs: now)
            state.nextSequence += 1
            Self.keep(push, in: &state, keep: !request.noRewind, configuration)
            // Queued under the lock: every receiver gets the channel's broadcasts in sequence order.
            var receivers = publisher.subscriptions.members(of: key)
            if !request.echo { receivers.removeAll { $0 === session } }
            if !receivers.isEmpty {
                publisher.publish(Push.channelBroadcast(push), to: .sessions(receivers), delivery: .queued)
            }
            // Under the lock too: the other nodes get this node's broadcasts in sequence order.
            relay?.relay(push, keep: !request.noRewind)
            return .success((push, receivers.count))
        }
        switch outcome {
        case .failure(let rejection):
            throw rejection
        case .success(let accepted):
            return BroadcastResponse(
                sequence: accepted.push.sequence, timestampMs: now, delivered: UInt64(accepted.delivered))
        }
    }

    private func rewind(_ request: RewindBroadcastsRequest, context: RequestContext) throws(RequestRejection) -> RewindBroadcastsResponse {
        let key = try Self.channelKey(request.channel, request.channelType)
        guard request.limit <= UInt64(BroadcastConfiguration.maxRewindCountLimit) else {
            throw RequestRejection(.invalidRewind, "a rewind asks for at most \(BroadcastConfiguration.maxRewindCountLimit) broadcasts")
        }
        guard request.maxAgeSeconds <= UInt64(BroadcastConfiguration.maxRewindSecondsLimit) else {
            throw RequestRejection(.invalidRewind, "a rewind reaches back at most \(BroadcastConfiguration.maxRewindSecondsLimit) seconds")
        }
        guard self.publisher.subscriptions.options(of: context.session, in: key) != nil else {
            throw RequestRejection(.notSubscribed, "subscribe to \(key) before asking for its broadcasts")
        }
        let now = UInt64(max(context.nowMillis, 0))
        var oldest = now.subtractingClamped(UInt64(self.configuration.rewindSeconds) * 1000)
        if request.maxAgeSeconds > 0 { oldest = max(oldest, now.subtractingClamped(request.maxAgeSeconds * 1000)) }
        return self.state.withLock { state in
            guard let ring = state.rings[key] else { return RewindBroadcastsResponse() }
            return RewindBroadcastsResponse(
                broadcasts: ring.rewind(limit: Int(request.limit), oldestMs: oldest, afterSequence: request.afterSequence),
                latestSequence: ring.latestSequence)
        }
    }

    /// Delivers a broadcast another node accepted to this node's members of its channel, under a sequence of this
    /// node's, and keeps it for rewind here when `keep`.
    public func receiveRelayed(_ relayed: ChannelBroadcast, keep: Bool) {
        guard let key = try? Self.channelKey(relayed.channel, relayed.channelType) else { return }
        let configuration = self.configuration
        let publisher = self.publisher
        self.state.withLock { state in
            var push = relayed
            push.sequence = state.nextSequence
            state.nextSequence += 1
            Self.keep(push, in: &state, keep: keep, configuration)
            let receivers = publisher.subscriptions.members(of: key)
            if !receivers.isEmpty {
                publisher.publish(Push.channelBroadcast(push), to: .sessions(receivers), delivery: .queued)
            }
        }
    }

    // MARK: memory

    private static func keep(_ push: ChannelBroadcast, in state: inout State, keep: Bool, _ configuration: BroadcastConfiguration) {
        let key = ChannelKey(name: push.channel, type: push.channelType)
        let oldest = push.timestampMs.subtractingClamped(UInt64(configuration.rewindSeconds) * 1000)
        let entry = RewoundBroadcast(
            sequence: push.sequence, sender: push.sender, data: push.data, timestampMs: push.timestampMs)
        state.rings[key, default: RewindRing()].append(
            entry, keep: keep, capacity: configuration.rewindCount, oldestMs: oldest)
    }

    /// Drops the broadcasts that aged out and the channels left with none.
    public func sweep() {
        let now = UInt64(max(self.nowMillis(), 0))
        let oldest = now.subtractingClamped(UInt64(self.configuration.rewindSeconds) * 1000)
        let capacity = self.configuration.rewindCount
        self.state.withLock { state in
            for key in Array(state.rings.keys) {
                state.rings[key]!.evict(capacity: capacity, oldestMs: oldest)
                if state.rings[key]!.count == 0 { state.rings[key] = nil }
            }
        }
    }

    private static func channelKey(_ name: String, _ type: ChannelType) throws(RequestRejection) -> ChannelKey {
        do throws(SwitchboardStoreError) {
            return try PresenceRegistry.validate(name, type, checkLength: true)
        } catch {
            throw RequestRejection(error.body)
        }
    }
}

extension UInt64 {
    fileprivate func subtractingClamped(_ other: UInt64) -> UInt64 { self >= other ? self - other : 0 }
}
