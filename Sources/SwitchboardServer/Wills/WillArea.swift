import Logging
import NIOCore
import Synchronization
import SwitchboardStore
import SwitchboardWire

/// Last wills (`Protocol/SPEC.md` §13.10): `setWill` and `getWill`, and running a will when its session ends other
/// than by logout or the gateway's shutdown, at once or after its delay unless a session of the same user starts
/// first.
///
/// A will's actions run one after the other, each as a request of its own operation from the ended session (its
/// user and grants), through an ``InternalCaller`` over the gateway's command areas: the same compare-and-set,
/// lock, grant and limit checks a client's request gets, and the same storage and lock events.
///
/// On a single gateway wills live in this process's memory: a shutdown or crash drops them unfired (the spec's rule),
/// and clients register them again on their next session. A cluster node also keeps them in its ``WillEngine``: the
/// node claims a will before it runs it (so it runs once), a delayed will's claim fails while its user has a session
/// on any node, and the wills of a node that died are taken over by the node that sweeps it.
public final class WillArea: RequestHandler, SessionObserver {
    private let book = Mutex(WillBook())
    private let caller = Mutex<InternalCaller?>(nil)
    private let sessions: SessionRegistry
    private let limits: StoreLimits
    private let timerLoop: any EventLoop
    private let engine: (any WillEngine)?
    private let nowMillis: @Sendable () -> Int64
    private let logger: Logger

    /// Creates the area; ``bind(_:)`` gives it the caller its actions run through once every area exists.
    /// `engine` nil: wills in memory only (a single gateway).
    init(
        sessions: SessionRegistry, limits: StoreLimits, timerLoop: any EventLoop, engine: (any WillEngine)?,
        nowMillis: @escaping @Sendable () -> Int64, logger: Logger
    ) {
        self.sessions = sessions
        self.limits = limits
        self.timerLoop = timerLoop
        self.engine = engine
        self.nowMillis = nowMillis
        self.logger = logger
        engine?.onTakenOver { [weak self] wills in self?.takeOver(wills) }
    }

    /// Runs the actions of fired wills through `caller` (made over every command area, this one included).
    func bind(_ caller: InternalCaller) {
        self.caller.withLock { $0 = caller }
    }

    /// Registered wills and wills waiting out their delay on this node (for tests and statistics).
    public var counts: (registered: Int, pending: Int) {
        self.book.withLock { ($0.registeredCount, $0.pendingCount) }
    }

    public var operations: [Opcode] { [.setWill, .getWill] }

    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        switch request {
        case .setWill(let body):
            let will: LastWill
            do throws(RequestRejection) {
                will = try LastWill(body, limits: self.limits)
            } catch {
                return .failure(error.body)
            }
            let session = context.session.info
            let answer = Response.setWill(SetWillResponse(actions: UInt64(will.actions.count)))
            guard let engine = self.engine else {
                self.book.withLock { $0.register(will, for: session.sessionID) }
                return .response(answer)
            }
            // A cluster node stores the will before it answers, so a node that sweeps this one can run it.
            let (responder, payload) = (context.responder, WillPayload.encode(will, of: session))
            Task { [self] in
                do {
                    if will.actions.isEmpty {
                        try await engine.remove(sessionID: session.sessionID)
                    } else {
                        try await engine.store(
                            StoredWill(sessionID: session.sessionID, userID: session.userID, payload: payload))
                    }
                } catch {
                    self.logger.error("a last will could not be stored", metadata: ["error": "\(error)"])
                    responder.fail(ErrorBody(.storageFailure, "the will could not be stored"))
                    return
                }
                self.book.withLock { $0.register(will, for: session.sessionID) }
                responder.succeed(answer)
            }
            return .deferred
        case .getWill:
            let will = self.book.withLock { $0.will(of: context.session.info.sessionID) }
            return .response(
                .getWill(GetWillResponse(actions: will?.actions ?? [], delaySeconds: will?.delaySeconds ?? 0)))
        default:
            return .failure(ErrorBody(.unavailable, "\(request.operation.name) is not a will operation"))
        }
    }

    public func sessionStarted(_ session: SessionHandle) {
        let cancelled = self.book.withLock { $0.userCameBack(session.info.userID) }
        if cancelled > 0 {
            self.logger.debug(
                "last wills cancelled: their user came back",
                metadata: ["user": "\(session.info.userID)", "wills": "\(cancelled)"])
        }
    }

    public func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        let info = session.info
        let (ending, hadWill) = self.book.withLock { book in
            let had = book.will(of: info.sessionID) != nil
            return (book.sessionEnded(info, reason: reason), had)
        }
        switch ending {
        case .nothing:
            if hadWill, let engine = self.engine {
                Task { try? await engine.remove(sessionID: info.sessionID) }
            }
        case .fireNow(let entry):
            self.claimThenRun(entry, endedAtMs: self.nowMillis(), unlessUserOnline: false)
        case .waitThenFire(let id, let delaySeconds):
            let endedAt = self.nowMillis()
            if let engine = self.engine {
                Task { try? await engine.sessionEnded(sessionID: info.sessionID, atMs: endedAt) }
            }
            self.timerLoop.scheduleTask(in: .seconds(Int64(delaySeconds))) { [self] in
                guard let entry = self.book.withLock({ $0.fire(id) }) else {
                    // Cancelled here: the user came back to this node. The row goes too (it would be claimed never).
                    if let engine = self.engine { Task { try? await engine.remove(sessionID: info.sessionID) } }
                    return
                }
                // A session of the user that is still open (another device all along) counts as being back.
                if self.sessions.hasSessions(ofUser: entry.session.userID) {
                    self.logger.debug(
                        "last will not fired: its user is online", metadata: ["user": "\(entry.session.userID)"])
                    if let engine = self.engine { Task { try? await engine.remove(sessionID: info.sessionID) } }
                    return
                }
                self.claimThenRun(entry, endedAtMs: endedAt, unlessUserOnline: true)
            }
        }
    }

    /// Runs `entry` once it is this node's to run: at once on a single gateway; in a cluster once its engine
    /// claimed it (marked ended first when it fires at once).
    private func claimThenRun(_ entry: WillBook.Pending, endedAtMs: Int64, unlessUserOnline: Bool) {
        guard let engine = self.engine else {
            self.run(entry)
            return
        }
        let sessionID = entry.session.sessionID
        Task { [self] in
            do {
                if !unlessUserOnline { try await engine.sessionEnded(sessionID: sessionID, atMs: endedAtMs) }
                guard try await engine.claim(sessionID: sessionID, unlessUserOnline: unlessUserOnline) else {
                    self.logger.debug("last will not fired: cancelled or run elsewhere", metadata: ["session": "\(sessionID)"])
                    return
                }
            } catch {
                self.logger.error(
                    "a last will could not be claimed; not run", metadata: ["session": "\(sessionID)", "error": "\(error)"])
                return
            }
            self.run(entry)
        }
    }

    /// Runs the wills this node took over from a dead node, each when its delay (counted from its session's end)
    /// is up, once claimed.
    private func takeOver(_ wills: [StoredWill]) {
        let now = self.nowMillis()
        for stored in wills {
            guard let (session, body) = WillPayload.decode(stored.payload),
                let will = try? LastWill(body, limits: self.limits)
            else {
                self.logger.error("a taken-over last will could not be read; dropped", metadata: ["session": "\(stored.sessionID)"])
                continue
            }
            let entry = WillBook.Pending(session: session, will: will)
            let endedAt = stored.endedAtMs > 0 ? stored.endedAtMs : now
            let due = endedAt + Int64(will.delaySeconds) * 1000
            let delayed = will.delaySeconds > 0
            self.timerLoop.scheduleTask(in: .milliseconds(max(due - now, 0))) { [self] in
                self.claimThenRunTakenOver(entry, unlessUserOnline: delayed)
            }
        }
    }

    private func claimThenRunTakenOver(_ entry: WillBook.Pending, unlessUserOnline: Bool) {
        guard let engine = self.engine else { return }
        let sessionID = entry.session.sessionID
        Task { [self] in
            guard (try? await engine.claim(sessionID: sessionID, unlessUserOnline: unlessUserOnline)) == true else {
                return
            }
            self.run(entry)
        }
    }

    /// Runs the will's actions in order, each once the one before has been answered.
    private func run(_ entry: WillBook.Pending) {
        guard let caller = self.caller.withLock({ $0 }) else {
            self.logger.error("a last will fired before the gateway's areas were bound; dropped")
            return
        }
        self.logger.info(
            "last will fired",
            metadata: ["user": "\(entry.session.userID)", "session": "\(entry.session.sessionID)",
                "actions": "\(entry.will.requests.count)"])
        self.runAction(0, of: entry, caller: caller)
    }

    private func runAction(_ index: Int, of entry: WillBook.Pending, caller: InternalCaller) {
        guard index < entry.will.requests.count else { return }
        let request = entry.will.requests[index]
        caller.call(request, as: entry.session, on: self.timerLoop).whenComplete { [self] result in
            if case .failure(let error) = result {
                let body = (error as? InternalCallError)?.body ?? ErrorBody(.internal, "\(error)")
                self.logger.warning(
                    "a last will's action failed",
                    metadata: ["user": "\(entry.session.userID)", "action": "\(index)",
                        "op": "\(request.operation.name)", "code": "\(body.code)", "message": "\(body.message)"])
            }
            self.runAction(index + 1, of: entry, caller: caller)
        }
    }
}
