import Logging
import SwitchboardWire

/// The admin change stream operations (`Protocol/SPEC.md` §13.9): `subscribeChanges`, `unsubscribeChanges` and the
/// `change` push, over this node's ``ChangeLog``.
///
/// One stream per session: subscribing again replaces its filter (and may resume); the session's end closes it.
/// The grant check (`moderate` covering the patterns) runs before the area sees a request
/// (``RequestAuthorizer/checkSubscribeChanges(_:)``).
public final class ChangeArea: RequestHandler, SessionObserver {
    /// The log the streams read.
    public let log: ChangeLog

    /// Creates the area over `log`.
    public init(log: ChangeLog) {
        self.log = log
    }

    public var operations: [Opcode] { [.subscribeChanges, .unsubscribeChanges] }

    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        switch request {
        case .subscribeChanges(let body):
            let filter: ChangeFilter
            do throws(RequestRejection) {
                filter = try ChangeFilter(body, subscriberID: context.session.info.userID)
            } catch {
                return .failure(error.body)
            }
            let opened = self.log.open(
                context.session, filter: filter, resumeEpoch: body.resumeEpoch, resumeFrom: body.resumeFrom)
            return .response(
                .subscribeChanges(
                    SubscribeChangesResponse(
                        epoch: self.log.epoch, position: opened.position, gap: opened.gap,
                        replayed: UInt64(opened.replayed))))
        case .unsubscribeChanges:
            self.log.close(context.session)
            return .response(.unsubscribeChanges(EmptyBody()))
        default:
            return .failure(ErrorBody(.unavailable, "\(request.operation.name) is not a change stream operation"))
        }
    }

    public func sessionStarted(_ session: SessionHandle) {}

    public func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        self.log.close(session)
    }
}
