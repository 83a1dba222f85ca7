import Logging
import NIOCore
import SwitchboardStore
import SwitchboardWire

/// The profile area (`Protocol/SPEC.md` §13.5): the wire side of a ``ProfileDirectory``, which holds the user, group
/// and group member records, member lists, change subscriptions and providers, persisted through a
/// ``ProfileBackend`` (``ProfileStore``). This adapter decodes requests, calls the directory, and encodes its answers
/// (writes after their commit), change pushes (`profileChanged`) and provider requests (`providerRequest`); it also
/// keeps each waiting read's provider timeout on the reading session's event loop.
public final class ProfileArea: EncodedReadHandler, SessionObserver {
    /// Fixed limits of §11.
    public typealias Limits = ProfileLimits

    /// The profile domain this area serves.
    public let directory: ProfileDirectory<SessionHandle>
    /// How long a read waits for a provider's answer.
    public let providerTimeout: TimeAmount
    private let logger: Logger

    /// Creates the area from what `store` holds.
    ///
    /// - Parameters:
    ///   - store: Where the directory persists.
    ///   - providerTimeout: How long a read waits for a provider's answer (§11: 5 s).
    ///   - publisher: Where profile changes go to their subscribers.
    ///   - logger: Where requests that fail for a reason the client did not cause are logged (the client gets
    ///     `internal` with a fixed text).
    /// - Throws: What the backend throws when it cannot be read (GRDB's `DatabaseError` for ``ProfileStore``).
    public init(
        store: any ProfileBackend, providerTimeout: TimeAmount = .seconds(5),
        publisher: PushPublisher,
        logger: Logger = Logger(label: "switchboard")
    ) throws {
        self.providerTimeout = providerTimeout
        self.logger = logger
        self.directory = try ProfileDirectory(
            backend: store,
            publish: { change, targets in publisher.publish(.profileChanged(change), to: .sessions(Array(targets))) },
            ask: { provider, request in provider.send(.providerRequest(request)) })
    }

    public var operations: [Opcode] {
        [
            .setUserInfo, .getUserInfo, .setGroupInfo, .getGroupInfo, .setGroupMemberInfo, .getGroupMemberInfo,
            .updateGroupMembers, .getGroupMembers, .clearProfile, .subscribeProfiles, .unsubscribeProfiles,
            .registerProvider, .answerProvider,
        ]
    }

    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        let session = context.session
        // The gateway checked the request against the session's grants before it came here (`Protocol/SPEC.md`
        // §5.10): whose records it may write was decided there, so the directory's own owner checks let it pass.
        // Only `clearProfile` with `all` still asks the directory whose records the caller may clear: everyone's for
        // an unrestricted session, the caller's own for any other.
        var unrestricted = true
        if case .clearProfile(let clear) = request, clear.all { unrestricted = session.info.grants.isUnrestricted }
        let caller = ProfileCaller(userID: session.info.userID, isAdmin: unrestricted)
        let now = UInt64(max(context.nowMillis, 0))
        do {
            switch request {
            case .setUserInfo(let set):
                try self.directory.setUser(set.info, by: caller, now: now, committed: Self.answer(context) { .setUserInfo(EmptyBody()) })
            case .setGroupInfo(let set):
                try self.directory.setGroup(set.info, by: caller, now: now, committed: Self.answer(context) { .setGroupInfo(EmptyBody()) })
            case .setGroupMemberInfo(let set):
                try self.directory.setMember(
                    set.info, by: caller, now: now, committed: Self.answer(context) { .setGroupMemberInfo(EmptyBody()) })
            case .updateGroupMembers(let update):
                try self.directory.updateMembers(
                    update, by: caller,
                    committed: Self.answer(context) { .updateGroupMembers(UpdateGroupMembersResponse(memberCount: $0)) })
            case .clearProfile(let clear):
                let answer = Self.answer(context) { .clearProfile(ClearProfileResponse(removed: $0)) }
                if let removed = try self.directory.clear(clear, by: caller, committed: answer) {
                    return .response(.clearProfile(ClearProfileResponse(removed: removed)))
                }
            case .getUserInfo(let get):
                return self.read(.getUserInfo, context) { try self.directory.getUsers(get, answer: $0) }
            case .getGroupInfo(let get):
                return self.read(.getGroupInfo, context) { try self.directory.getGroups(get, answer: $0) }
            case .getGroupMemberInfo(let get):
                return self.read(.getGroupMemberInfo, context) { try self.directory.getMembers(get, answer: $0) }
            case .getGroupMembers(let get):
                return self.read(.getGroupMembers, context) { try self.directory.getMemberList(get, answer: $0) }
            case .subscribeProfiles(let subscribe):
                try self.directory.subscribe(subscribe, session: session) { session.reserveSubscriptions($0) }
                return .response(.subscribeProfiles(EmptyBody()))
            case .unsubscribeProfiles(let unsubscribe):
                let released = try self.directory.unsubscribe(unsubscribe, session: session)
                if released > 0 { session.releaseSubscriptions(released) }
                return .response(.unsubscribeProfiles(EmptyBody()))
            case .registerProvider(let register):
                let answer = Self.answer(context) { (_: Void) in .registerProvider(EmptyBody()) }
                guard try !self.directory.register(register, session: session, by: caller, committed: answer) else {
                    return .response(.registerProvider(EmptyBody()))
                }
            case .answerProvider(let answer):
                try self.directory.answer(answer, from: session, now: now)
                return .response(.answerProvider(EmptyBody()))
            default:
                return .failure(ErrorBody(.internal, "not a profile operation"))
            }
            return .deferred
        } catch let refused as ProfileError {
            return .failure(refused.body)
        } catch {
            return .failure(RequestRejection.unexpected(error, operation: request.operation, logger: self.logger))
        }
    }

    /// A commit callback answering the request with `response` of the committed value, or with the refusal.
    private static func answer<Value: Sendable>(
        _ context: RequestContext, _ response: @escaping @Sendable (Value) -> Response
    ) -> ProfileCommit<Value> {
        let responder = context.responder
        return { outcome in
            switch outcome {
            case .success(let value): responder.succeed(response(value))
            case .failure(let refused): responder.fail(refused.body)
            }
        }
    }

    // MARK: Reads

    /// Starts a read; one waiting for a provider is answered later, or when the provider timeout passes.
    private func read(
        _ operation: Opcode, _ context: RequestContext,
        _ start: (@escaping @Sendable (ProfileReadResult) -> Void) throws -> ProfileReadStart
    ) -> RequestOutcome {
        let responder = context.responder
        do {
            switch try start({ result in Self.respond(Self.outcome(operation, result), with: responder) }) {
            case .answered(let result):
                return Self.outcome(operation, result)
            case .waiting(let readID):
                // A read answered before its timeout leaves the timer to fire and find nothing (NIO cancels timers by
                // a linear search of the loop's timer heap).
                context.session.eventLoop.scheduleTask(in: self.providerTimeout) { [directory] in
                    directory.expire(readID: readID)
                }
                return .deferred
            }
        } catch let refused as ProfileError {
            return .failure(refused.body)
        } catch {
            return .failure(RequestRejection.unexpected(error, operation: operation, logger: self.logger))
        }
    }

    private static func outcome(_ operation: Opcode, _ result: ProfileReadResult) -> RequestOutcome {
        switch result {
        case .records(let body): .encodedResponse(EncodedResponse(operation: operation, body: body))
        case .memberPage(let page): .response(.getGroupMembers(page))
        case .failure(let error): .failure(error)
        }
    }

    private static func respond(_ outcome: RequestOutcome, with responder: Responder) {
        switch outcome {
        case .response(let response): responder.succeed(response)
        case .encodedResponse(let response): responder.succeed(response)
        case .failure(let error): responder.fail(error)
        case .deferred: responder.fail(ErrorBody(.internal, "read not answered"))
        }
    }

    public var encodedReadOperations: [Opcode] { [.getUserInfo, .getGroupInfo] }

    /// A batch of user or group infos straight from the request body into the connection's output (see
    /// ``ProfileDirectory/answerEncoded(kind:body:writeBody:)``); false: the typed path answers.
    public func answerEncoded(
        _ operation: Opcode, body: ByteBuffer, session: SessionHandle, into output: inout EncodedAnswerOutput
    ) -> Bool {
        let kind: ProfileKind
        switch operation {
        case .getUserInfo: kind = .user
        case .getGroupInfo: kind = .group
        default: return false
        }
        return self.directory.answerEncoded(kind: kind, body: body) { size, write in output.writeBody(size: size, write) }
    }

    // MARK: Sessions

    public func sessionStarted(_ session: SessionHandle) {}

    public func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        self.directory.sessionEnded(session)
    }
}
