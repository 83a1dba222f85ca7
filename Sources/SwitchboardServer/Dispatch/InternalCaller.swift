import NIOCore
import Synchronization
import SwitchboardWire

/// What a command area answered a request of an ``InternalCaller``.
enum InternalAnswer: Sendable {
    /// A typed response.
    case response(Response)
    /// A response the area encoded beforehand (decoded by the caller).
    case encoded(EncodedResponse)
    /// An error.
    case failure(ErrorBody)
}

/// Runs typed requests through the gateway's command areas for a caller inside the gateway (the inspector), under
/// the identity it is given: the same handler, the same grant check (RequestAuthorizer) and the same answer a
/// client's request of that op gets, without a connection. On a cluster node the areas answer from the cluster's
/// engines, so the answers are the cluster's, as a client's would be.
///
/// The caller's session (``SessionHandle/init(internalCaller:eventLoop:)``) has no connection: pushes sent to it go
/// nowhere and it may hold no subscriptions. The inspector's caller accepts ``readOperations``; the HTTP API's
/// (``GatewayOperations``) the operations it serves, writes among them, none that needs a live session.
final class InternalCaller: Sendable {
    /// The operations an internal caller may run: reads only.
    static let readOperations: Set<Opcode> = [
        .listChannels, .whoNow, .whereNow, .getState, .getChannelMetadata, .getUserMetadata, .getLastSeen, .info,
    ]

    /// Handlers indexed by op (0...63), as the gateway's dispatch has them.
    private let handlers: [(any RequestHandler)?]
    /// The operations this caller runs; others answer `unavailable`.
    private let operations: Set<Opcode>
    private let nowMillis: @Sendable () -> Int64
    private let nextRequestID = Atomic<UInt32>(0)

    /// A caller of `handlers` (the command areas a ``GatewayApplication`` built), with the gateway's clock, that runs
    /// `operations`.
    init(
        handlers: [any RequestHandler], operations: Set<Opcode> = InternalCaller.readOperations,
        nowMillis: @escaping @Sendable () -> Int64
    ) {
        var table: [(any RequestHandler)?] = Array(repeating: nil, count: 64)
        for handler in handlers {
            for op in handler.operations { table[Int(op.rawValue)] = handler }
        }
        self.handlers = table
        self.operations = operations
        self.nowMillis = nowMillis
    }

    /// Runs `request` as `session` on `eventLoop` (one of the gateway's loops, where areas expect to be called).
    ///
    /// - Returns: the area's response, or the error it (or the grant check) answered; `unavailable` for an op no area
    ///   serves or one this caller does not run.
    func call(_ request: Request, as session: SessionInfo, on eventLoop: any EventLoop) -> EventLoopFuture<Response> {
        let op = request.operation
        guard self.operations.contains(op), let handler = self.handlers[Int(op.rawValue)] else {
            return eventLoop.makeFailedFuture(InternalCallError(ErrorBody(.unavailable, "\(op.name) is not available here")))
        }
        if !session.grants.isUnrestricted, let denied = RequestAuthorizer(session: session).check(request) {
            return eventLoop.makeFailedFuture(InternalCallError(denied.errorBody))
        }
        let promise = eventLoop.makePromise(of: Response.self)
        let requestID = self.nextRequestID.wrappingAdd(1, ordering: .relaxed).newValue
        let answer: @Sendable (InternalAnswer) -> Void = { answer in
            switch answer {
            case .response(let response):
                promise.succeed(response)
            case .encoded(let encoded):
                do throws(SwitchboardWireError) {
                    promise.succeed(
                        try WireReader.read(encoded.body) { (reader: inout WireReader) throws(SwitchboardWireError) in
                            try Response.decode(encoded.operation, from: &reader)
                        })
                } catch {
                    promise.fail(InternalCallError(ErrorBody(.internal, "an encoded answer did not decode: \(error)")))
                }
            case .failure(let body):
                promise.fail(InternalCallError(body))
            }
        }
        let nowMillis = self.nowMillis
        eventLoop.execute {
            let context = RequestContext(
                session: SessionHandle(internalCaller: session, eventLoop: eventLoop), requestID: requestID,
                responder: Responder(requestID: requestID, op: op.rawValue, answer: answer), nowMillis: nowMillis())
            switch handler.handle(request, context: context) {
            case .response(let response): answer(.response(response))
            case .encodedResponse(let response): answer(.encoded(response))
            case .failure(let body): answer(.failure(body))
            case .deferred: break  // the area answers through the responder
            }
        }
        return promise.futureResult
    }
}

/// The error a command area answered an ``InternalCaller``'s request with.
struct InternalCallError: Error, Sendable {
    /// The error as a client would have received it.
    var body: ErrorBody

    init(_ body: ErrorBody) {
        self.body = body
    }
}
