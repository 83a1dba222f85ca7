import NIOCore
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// This node's admin change log (`Protocol/SPEC.md` §13.9): every presence, online-state, metadata and lock change
/// the node learns (its own sessions' and, in a cluster, what the feed brings), numbered by position, kept in a
/// bounded ring, and streamed to the admin sessions whose filter it matches.
///
/// - **Positions** start at 1 and grow by one per change recorded, in the order the domains announce them (each
///   domain announces under the lock that orders its own events). They mean something on this node in this
///   ``epoch`` only: another node, or this one after a restart, numbers its own changes.
/// - **Recording** starts with the first admin stream and goes on while one is open and for ``idleRetention`` after
///   the last one closed (so a client that reconnects can resume), then stops: the ring is emptied and one position
///   skipped, so that no resume across the pause claims to be complete. A gateway nobody watches pays one relaxed
///   atomic load per change (``ChangeTap``).
/// - **Resume**: the changes after a position are replayed when the ring still holds the next one (same epoch);
///   otherwise the answer says `gap`.
/// - **Flow control**: pushes go through each session's outbound queue like every other push; a stream that cannot
///   keep up passes the queue's hard cap and its session is ended with `slowConsumer` (3004). The log itself holds
///   at most ``capacity`` changes.
public final class ChangeLog: Sendable {
    /// The default number of changes held for resuming.
    public static let defaultCapacity = 65_536
    /// How long recording goes on after the last stream closed.
    public static let defaultIdleRetentionMs: Int64 = 10 * 60 * 1000

    /// This run of the log: the gateway's start time in microseconds.
    public let epoch: UInt64
    /// How many changes the ring holds.
    public let capacity: Int
    /// How long recording goes on after the last stream closed, in ms.
    public let idleRetentionMs: Int64

    private struct Stream {
        var session: SessionHandle
        var filter: ChangeFilter
    }

    private struct State {
        /// The ring: `ring[(position - 1) % capacity]` once filled.
        var ring: [Change] = []
        /// Where the next change goes in `ring` once it is full.
        var ringStart = 0
        /// The position of the latest change recorded (or skipped).
        var latest: UInt64 = 0
        /// Whether changes are recorded now.
        var recording = false
        /// The open streams, by session.
        var streams: [ObjectIdentifier: Stream] = [:]
        /// When the last stream closed (ms), while none is open.
        var idleSinceMs: Int64 = 0

        /// The oldest position held (latest + 1 when the ring is empty).
        var oldestHeld: UInt64 { self.ring.isEmpty ? self.latest + 1 : self.ring[self.ringStart].position }
    }

    private let state = Mutex(State())
    private let taps: [ChangeTap]
    private let compressionThreshold: Int
    private let nowMillis: @Sendable () -> Int64

    /// Creates the log over the domains' `taps`, which it switches on and off.
    public init(
        taps: [ChangeTap], capacity: Int = ChangeLog.defaultCapacity,
        idleRetentionMs: Int64 = ChangeLog.defaultIdleRetentionMs,
        compressionThreshold: Int = FrameEncoder.defaultCompressionThreshold,
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis
    ) {
        precondition(capacity > 0, "the change log holds at least one change")
        self.epoch = UInt64(max(nowMillis(), 0)) * 1000 + UInt64.random(in: 0..<1000)
        self.capacity = capacity
        self.idleRetentionMs = idleRetentionMs
        self.taps = taps
        self.compressionThreshold = compressionThreshold
        self.nowMillis = nowMillis
        for tap in taps {
            tap.connect { [weak self] change in self?.record(change) }
        }
    }

    /// What ``open(_:filter:resumeEpoch:resumeFrom:)`` answers.
    struct Opened: Sendable {
        var position: UInt64
        var gap: Bool
        var replayed: Int
    }

    /// Opens (or refilters) `session`'s stream; with a resume, queues the held changes after `resumeFrom` that match
    /// before any live one. Call on the session's loop, before its answer is written: the replay and the live
    /// changes are queued behind it, in position order.
    func open(_ session: SessionHandle, filter: ChangeFilter, resumeEpoch: UInt64, resumeFrom: UInt64) -> Opened {
        self.state.withLock { state in
            if !state.recording {
                state.recording = true
                for tap in self.taps { tap.setActive(true) }
            }
            state.streams[ObjectIdentifier(session)] = Stream(session: session, filter: filter)
            guard resumeEpoch != 0 else { return Opened(position: state.latest, gap: false, replayed: 0) }
            guard resumeEpoch == self.epoch, resumeFrom <= state.latest, resumeFrom + 1 >= state.oldestHeld else {
                return Opened(position: state.latest, gap: true, replayed: 0)
            }
            var replay: [Change] = []
            let count = Int(state.latest - resumeFrom)
            let firstIndex = state.ring.count - count
            for offset in 0..<count {
                let change = state.ring[(state.ringStart + firstIndex + offset) % state.ring.count]
                if filter.matches(change) { replay.append(change) }
            }
            if !replay.isEmpty {
                let pushes = replay.map { EncodedPush(.change($0), compressionThreshold: self.compressionThreshold) }
                session.eventLoop.execute {
                    for push in pushes { session.sendOnItsLoop(push) }
                }
            }
            return Opened(position: state.latest, gap: false, replayed: replay.count)
        }
    }

    /// Closes `session`'s stream, if it has one.
    ///
    /// - Returns: whether it had one.
    @discardableResult
    func close(_ session: SessionHandle) -> Bool {
        let now = self.nowMillis()
        return self.state.withLock { state in
            guard state.streams.removeValue(forKey: ObjectIdentifier(session)) != nil else { return false }
            if state.streams.isEmpty { state.idleSinceMs = now }
            return true
        }
    }

    /// The number of open streams.
    public var streamCount: Int { self.state.withLock { $0.streams.count } }

    /// The position of the latest change recorded.
    public var latestPosition: UInt64 { self.state.withLock { $0.latest } }

    /// Records one change a domain announced and streams it to the matching sessions.
    func record(_ observed: ObservedChange) {
        let now = self.nowMillis()
        var change = Self.change(of: observed, nowMillis: now)
        self.state.withLock { state in
            guard state.recording else { return }
            if state.streams.isEmpty, now - state.idleSinceMs > self.idleRetentionMs {
                // Nobody watched for a while: stop, and make every earlier position unresumable.
                state.recording = false
                for tap in self.taps { tap.setActive(false) }
                state.ring = []
                state.ringStart = 0
                state.latest += 1
                return
            }
            state.latest += 1
            change.position = state.latest
            if state.ring.count < self.capacity {
                state.ring.append(change)
            } else {
                state.ring[state.ringStart] = change
                state.ringStart = (state.ringStart + 1) % self.capacity
            }
            var encoded: EncodedPush?
            for stream in state.streams.values where stream.filter.matches(change) {
                let push = encoded ?? EncodedPush(.change(change), compressionThreshold: self.compressionThreshold)
                encoded = push
                let session = stream.session
                // Always queued, never written inline: a replay queued by `open` goes out first.
                session.eventLoop.execute { session.sendOnItsLoop(push) }
            }
        }
    }

    /// The change push of what a domain announced (position set when recorded).
    static func change(of observed: ObservedChange, nowMillis: Int64) -> Change {
        let now = UInt64(max(nowMillis, 0))
        switch observed {
        case .presence(let event):
            let kind: ChangeKind
            switch event.eventType {
            case .remoteJoin: kind = .presenceJoin
            case .remoteLeave: kind = .presenceLeave
            case .remoteTimeout: kind = .presenceTimeout
            default: kind = .presenceState
            }
            return Change(
                kind: kind, channel: event.channel, channelType: event.channelType, userId: event.publisher,
                states: event.states, totalOccupancy: event.totalOccupancy, timestampMs: now)
        case .online(let event):
            return Change(
                kind: .online, userId: event.publisher, onlineValue: event.value,
                onlineClientTypes: event.onlineClientTypes, timestampMs: now)
        case .storage(let event):
            let isChannel = event.storageType == .channel
            return Change(
                kind: isChannel ? .channelMetadata : .userMetadata, channel: isChannel ? event.target : "",
                channelType: isChannel ? event.channelType : .message, userId: isChannel ? "" : event.target,
                storageEventType: event.eventType, majorRevision: event.majorRevision, items: event.items,
                author: event.publisher, timestampMs: now, expiresAtMs: event.expiresAtMs)
        case .lock(let event):
            return Change(
                kind: .lock, channel: event.channel, channelType: event.channelType, lockEventType: event.eventType,
                locks: event.locks, timestampMs: now)
        }
    }
}
