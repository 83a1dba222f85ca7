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
/// lock, grant and limit checks a client's request gets, and the same storage and lock events. Wills live in this
/// process's memory: a gateway shutdown or crash drops them unfired (the spec's rule), and clients register them
/// again on their next session.
public final class WillArea: RequestHandler, SessionObserver {
    private let book = Mutex(WillBook())
    private let caller = Mutex<InternalCaller?>(nil)
    private let sessions: SessionRegistry
    private let limits: StoreLimits
    private let timerLoop: any EventLoop
    private let logger: Logger

    /// Creates the area; ``bind(_:)`` gives it the caller its actions run through once every area exists.
    init(sessions: SessionRegistry, limits: StoreLimits, timerLoop: any EventLoop, logger: Logger) {
        self.sessions = sessions
        self.limits = limits
        self.timerLoop = timerLoop
        self.logger = logger
    }

    /// Runs the actions of fired wills through `caller` (made over every command area, this one included).
    func bind(_ caller: InternalCaller) {
        self.caller.withLock { $0 = caller }
    }

    /// Registered wills and wills waiting out their delay (for tests and statistics).
    var counts: (registered: Int, pending: Int) {
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
            let sessionID = context.session.info.sessionID
            self.book.withLock { $0.register(will, for: sessionID) }
            return .response(.setWill(SetWillResponse(actions: UInt64(will.actions.count))))
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
        switch self.book.withLock({ $0.sessionEnded(session.info, reason: reason) }) {
        case .nothing:
            break
        case .fireNow(let entry):
            self.run(entry)
        case .waitThenFire(let id, let delaySeconds):
            self.timerLoop.scheduleTask(in: .seconds(Int64(delaySeconds))) { [self] in
                guard let entry = self.book.withLock({ $0.fire(id) }) else { return }
                // A session of the user that is still open (another device all along) counts as being back.
                if self.sessions.hasSessions(ofUser: entry.session.userID) {
                    self.logger.debug(
                        "last will not fired: its user is online", metadata: ["user": "\(entry.session.userID)"])
                    return
                }
                self.run(entry)
            }
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
