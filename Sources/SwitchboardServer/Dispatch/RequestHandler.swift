import NIOCore
import SwitchboardWire

/// What a handler did with a request.
public enum RequestOutcome: Sendable {
    /// Answer now with this response.
    case response(Response)
    /// Answer now with a response whose body the handler assembled from bytes encoded beforehand.
    case encodedResponse(EncodedResponse)
    /// Answer now with this error.
    case failure(ErrorBody)
    /// The handler answers later through ``RequestContext/responder`` (a durable write, a lock wait, a provider).
    case deferred
}

/// A response body assembled by a handler from records it keeps encoded (a batch read copies each record's bytes
/// instead of encoding the record again); byte for byte what encoding the typed response would give.
public struct EncodedResponse: Sendable {
    /// The operation answered.
    public var operation: Opcode
    /// The encoded response body (`Protocol/SPEC.md` §3).
    public var body: ByteBuffer

    /// Creates a response from its operation and encoded body.
    public init(operation: Opcode, body: ByteBuffer) {
        self.operation = operation
        self.body = body
    }
}

/// Answers one request exactly once, from any thread.
public struct Responder: Sendable {
    /// Where the answer goes.
    enum Destination: Sendable {
        /// A client's connection, on its event loop; `inbox` takes answers from other threads to the loop, many in
        /// one task (nil: one `execute` per answer).
        case connection(NIOLoopBound<ConnectionHandler>, eventLoop: any EventLoop, inbox: LoopInbox?)
        /// A caller inside the gateway (``InternalCaller``), from whatever thread answers.
        case caller(@Sendable (InternalAnswer) -> Void)
    }

    let requestID: UInt32
    let op: UInt8
    let destination: Destination

    /// A responder that answers on `connection`.
    init(
        requestID: UInt32, op: UInt8, connection: NIOLoopBound<ConnectionHandler>, eventLoop: any EventLoop,
        inbox: LoopInbox?
    ) {
        self.requestID = requestID
        self.op = op
        self.destination = .connection(connection, eventLoop: eventLoop, inbox: inbox)
    }

    /// A responder that hands the answer to `answer` (an ``InternalCaller``'s request).
    init(requestID: UInt32, op: UInt8, answer: @escaping @Sendable (InternalAnswer) -> Void) {
        self.requestID = requestID
        self.op = op
        self.destination = .caller(answer)
    }

    /// Answers with a response.
    public func succeed(_ response: Response) {
        self.complete(.response(id: self.requestID, response), forCaller: .response(response))
    }

    /// Answers with a response encoded beforehand.
    public func succeed(_ response: EncodedResponse) {
        switch self.destination {
        case .connection(let connection, let eventLoop, let inbox):
            let id = self.requestID
            if eventLoop.inEventLoop {
                connection.value.completeDeferred(id: id, encoded: response)
            } else {
                Self.fromElsewhere(eventLoop, inbox) { connection.value.completeDeferred(id: id, encoded: response) }
            }
        case .caller(let answer):
            answer(.encoded(response))
        }
    }

    /// Answers with an error.
    public func fail(_ error: ErrorBody) {
        self.complete(.error(id: self.requestID, op: self.op, error), forCaller: .failure(error))
    }

    private func complete(_ message: @autoclosure () -> SwitchboardMessage, forCaller: @autoclosure () -> InternalAnswer) {
        switch self.destination {
        case .connection(let connection, let eventLoop, let inbox):
            let id = self.requestID
            let message = message()
            if eventLoop.inEventLoop {
                connection.value.completeDeferred(id: id, message)
            } else {
                Self.fromElsewhere(eventLoop, inbox) { connection.value.completeDeferred(id: id, message) }
            }
        case .caller(let answer):
            answer(forCaller())
        }
    }

    /// Runs `body` on the loop, from another thread (no closure is made for an answer given on the loop).
    private static func fromElsewhere(_ eventLoop: any EventLoop, _ inbox: LoopInbox?, _ body: @escaping @Sendable () -> Void) {
        if let inbox {
            inbox.post(body)
        } else {
            eventLoop.execute(body)
        }
    }
}

/// Everything a handler knows about the request it serves.
public struct RequestContext: Sendable {
    /// The session that sent the request.
    public var session: SessionHandle
    /// The request id.
    public var requestID: UInt32
    /// Answers a ``RequestOutcome/deferred`` request.
    public var responder: Responder
    /// Server time in ms since the Unix epoch.
    public var nowMillis: Int64
}

/// A command area: serves a set of operations. Called on the connection's event loop; must not block it.
public protocol RequestHandler: Sendable {
    /// The operations this handler serves.
    var operations: [Opcode] { get }
    /// Serves one request.
    func handle(_ request: Request, context: RequestContext) -> RequestOutcome
}

/// A command area that answers some reads straight from their encoded request bodies, without decoding them into a
/// ``Request`` (and its `String`s) first: for reads whose cost is mostly that decoding, such as batch reads of 100 ids.
public protocol EncodedReadHandler: RequestHandler {
    /// The operations it may answer this way (a subset of ``RequestHandler/operations``).
    var encodedReadOperations: [Opcode] { get }
    /// Answers a request of `operation` whose body is `body` (inflated) by writing the response body to `output`
    /// and returning true; or returns false, having written nothing, to have the request decoded and passed to
    /// ``RequestHandler/handle(_:context:)`` as usual. Return false for anything but the plain case (an error to
    /// report, a provider to ask), so that errors are reported exactly as the typed path reports them.
    func answerEncoded(
        _ operation: Opcode, body: ByteBuffer, session: SessionHandle, into output: inout EncodedAnswerOutput
    ) -> Bool
}

/// The answer of an ``EncodedReadHandler``: its body goes straight into the connection's output, behind the
/// response frame's header (or, when it is large enough to be compressed on this connection, through zlib), with no
/// buffer of its own.
public struct EncodedAnswerOutput: ResponseBodySink {
    let header: FrameHeader
    let encoder: FrameEncoder
    /// The connection's output, with the frame appended once a body was written.
    var buffer: ByteBuffer
    /// Whether a body was written (at most one is).
    public private(set) var isWritten = false

    init(header: FrameHeader, encoder: FrameEncoder, buffer: ByteBuffer) {
        self.header = header
        self.encoder = encoder
        self.buffer = buffer
    }

    /// Appends the response frame with a body of `size` bytes, which `write` must write exactly (checked). Once.
    public mutating func writeBody(size: Int, _ write: (inout WireWriter) -> Void) {
        precondition(!self.isWritten, "an answer has one body")
        self.isWritten = true
        self.encoder.encode(header: self.header, bodySize: size, into: &self.buffer, writeBody: write)
    }
}

/// Learns when sessions start and end (presence, online state, locks hang on this).
public protocol SessionObserver: Sendable {
    /// A session completed its handshake.
    func sessionStarted(_ session: SessionHandle)
    /// A session ended, and why.
    func sessionEnded(_ session: SessionHandle, reason: SessionEndReason)
    /// The session asked to log out: called while its `logout` request is handled, before the response is sent and
    /// before ``sessionEnded(_:reason:)`` (reason `logout`) follows. Observers whose effect of a logout must be
    /// visible by the time the client has the response (presence: the user leaves at once, SB-13.3-10) act here.
    func sessionLoggingOut(_ session: SessionHandle)
}

extension SessionObserver {
    /// By default a logout is handled by ``sessionEnded(_:reason:)`` alone.
    public func sessionLoggingOut(_ session: SessionHandle) {}
}
