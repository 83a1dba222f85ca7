import NIOCore

/// One typed frame of the protocol: what the codec turns bytes into and back (`Protocol/SPEC.md` §2, §5-§8).
public enum SwitchboardMessage: Sendable, Hashable {
    /// A control frame: handshake, keep-alive, goodbye.
    case control(Control)
    /// A request from a client, with its request id.
    case request(id: UInt32, Request)
    /// A successful response to the request with this id.
    case response(id: UInt32, Response)
    /// A failed response (ERROR flag) to the request with this id and op.
    case error(id: UInt32, op: UInt8, ErrorBody)
    /// A server push.
    case push(Push)
    /// A push with a code this version does not know; receivers ignore it (SPEC.md §8).
    case unknownPush(code: UInt8)

    /// The frame header this message travels under (without compression).
    public var header: FrameHeader {
        switch self {
        case .control(let control):
            return FrameHeader(kind: .control, op: control.controlOp.rawValue)
        case .request(let id, let request):
            return FrameHeader(kind: .request, op: request.operation.rawValue, requestID: id)
        case .response(let id, let response):
            return FrameHeader(kind: .response, op: response.operation.rawValue, requestID: id)
        case .error(let id, let op, _):
            return FrameHeader(kind: .response, op: op, flags: .error, requestID: id)
        case .push(let push):
            return FrameHeader(kind: .push, op: push.pushCode.rawValue)
        case .unknownPush(let code):
            return FrameHeader(kind: .push, op: code)
        }
    }

    /// Bytes the (uncompressed) body takes.
    @inlinable
    public var bodySize: Int {
        switch self {
        case .control(let control): return control.wireSize
        case .request(_, let request): return request.wireSize
        case .response(_, let response): return response.wireSize
        case .error(_, _, let body): return body.wireSize
        case .push(let push): return push.wireSize
        case .unknownPush: return 0
        }
    }

    /// Writes the (uncompressed) body.
    @inlinable
    public func encodeBody(to writer: inout WireWriter) {
        switch self {
        case .control(let control): control.encode(to: &writer)
        case .request(_, let request): request.encode(to: &writer)
        case .response(_, let response): response.encode(to: &writer)
        case .error(_, _, let body): body.encode(to: &writer)
        case .push(let push): push.encode(to: &writer)
        case .unknownPush: break
        }
    }

    /// Appends the (uncompressed) body to `buffer`.
    @inlinable
    public func encodeBody(into buffer: inout ByteBuffer) {
        buffer.writeSwitchboardEncoded(size: self.bodySize) { self.encodeBody(to: &$0) }
    }

    /// Decodes the body of a frame into a typed message.
    ///
    /// - Throws: ``SwitchboardWireError``. For requests the error carries the request id and op, and codes such as
    ///   ``ErrorCode/unknownOperation`` or ``ErrorCode/malformedBody`` leave the connection usable.
    public static func decode(_ frame: Frame) throws(SwitchboardWireError) -> SwitchboardMessage {
        let header = frame.header
        do throws(SwitchboardWireError) {
            return try WireReader.read(frame.body) { (reader: inout WireReader) throws(SwitchboardWireError) in
                try Self.decodeBody(header: header, reader: &reader)
            }
        } catch {
            var located = error
            located.op = header.op
            located.kind = header.kind
            if header.kind.hasRequestID { located.requestID = header.requestID }
            throw located
        }
    }

    static func decodeBody(header: FrameHeader, reader: inout WireReader) throws(SwitchboardWireError) -> SwitchboardMessage {
            switch header.kind {
            case .control:
                guard let op = ControlOp(rawValue: header.op) else {
                    throw SwitchboardWireError(.badHeader, "unknown control op 0x\(String(header.op, radix: 16))")
                }
                return .control(try Control.decode(op, from: &reader))
            case .request:
                guard let op = Opcode(rawValue: header.op) else {
                    throw SwitchboardWireError(.unknownOperation, "unknown op 0x\(String(header.op, radix: 16))")
                }
                return .request(id: header.requestID, try Request.decode(op, from: &reader))
            case .response:
                if header.flags.contains(.error) {
                    return .error(id: header.requestID, op: header.op, try ErrorBody(from: &reader))
                }
                guard let op = Opcode(rawValue: header.op) else {
                    throw SwitchboardWireError(.unknownOperation, "unknown op 0x\(String(header.op, radix: 16))")
                }
                return .response(id: header.requestID, try Response.decode(op, from: &reader))
            case .push:
                guard let code = PushCode(rawValue: header.op) else {
                    return .unknownPush(code: header.op)
                }
                return .push(try Push.decode(code, from: &reader))
            }
    }
}

extension SwitchboardMessage: JSONRepresentable {
    /// The canonical JSON rendering of a whole frame (`Protocol/SPEC.md` §10).
    public var jsonValue: JSONValue {
        switch self {
        case .control(let control):
            return .object([("kind", .string("control")), ("op", .string(control.controlOp.name)), ("body", control.jsonBody)])
        case .request(let id, let request):
            return .object([
                ("kind", .string("request")), ("op", .string(request.operation.name)), ("requestId", .uint(UInt64(id))),
                ("body", request.jsonBody),
            ])
        case .response(let id, let response):
            return .object([
                ("kind", .string("response")), ("op", .string(response.operation.name)),
                ("requestId", .uint(UInt64(id))), ("body", response.jsonBody),
            ])
        case .error(let id, let op, let body):
            let opName: JSONValue = Opcode(rawValue: op).map { .string($0.name) } ?? .uint(UInt64(op))
            var error = body.jsonValue
            if case .object(var members) = error, let code = ErrorCode(rawValue: UInt32(exactly: body.code) ?? 0).nameIfKnown {
                members.insert(("name", .string(code)), at: 1)
                error = .object(members)
            }
            return .object([("kind", .string("response")), ("op", opName), ("requestId", .uint(UInt64(id))), ("error", error)])
        case .push(let push):
            return .object([("kind", .string("push")), ("op", .string(push.pushCode.name)), ("body", push.jsonBody)])
        case .unknownPush(let code):
            return .object([("kind", .string("push")), ("op", .uint(UInt64(code))), ("body", .object([]))])
        }
    }

    /// Reads a frame's canonical JSON rendering back.
    public init(json: JSONValue) throws(SwitchboardWireError) {
        let kind = try JSONField.string(json["kind"] ?? .null, "kind")
        let opValue = json["op"] ?? .null
        let body = json["body"] ?? .object([])
        func requestID() throws(SwitchboardWireError) -> UInt32 {
            let raw = try JSONField.uint64(json["requestId"] ?? .null, "requestId")
            guard let id = UInt32(exactly: raw) else { throw JSONField.failure("requestId", "a u32", .uint(raw)) }
            return id
        }
        switch kind {
        case "control":
            guard let op = ControlOp(name: try JSONField.string(opValue, "op")) else {
                throw JSONField.failure("op", "a control op name", opValue)
            }
            self = .control(try Control.fromJSON(op, body: body))
        case "request":
            guard let op = Opcode(name: try JSONField.string(opValue, "op")) else {
                throw JSONField.failure("op", "an op name", opValue)
            }
            self = .request(id: try requestID(), try Request.fromJSON(op, body: body))
        case "response":
            if let error = json["error"] {
                let op: UInt8
                if let name = opValue.stringValue, let known = Opcode(name: name) {
                    op = known.rawValue
                } else if let raw = opValue.uint64Value, let narrow = UInt8(exactly: raw), narrow < 64 {
                    op = narrow
                } else {
                    throw JSONField.failure("op", "an op name or number", opValue)
                }
                var members = try JSONField.object(error, "error")
                members.removeAll { $0.key == "name" }  // derived from the code
                self = .error(id: try requestID(), op: op, try ErrorBody(json: .object(members)))
            } else {
                guard let op = Opcode(name: try JSONField.string(opValue, "op")) else {
                    throw JSONField.failure("op", "an op name", opValue)
                }
                self = .response(id: try requestID(), try Response.fromJSON(op, body: body))
            }
        case "push":
            if let name = opValue.stringValue, let code = PushCode(name: name) {
                self = .push(try Push.fromJSON(code, body: body))
            } else if let raw = opValue.uint64Value, let code = UInt8(exactly: raw), code < 64 {
                self = .unknownPush(code: code)
            } else {
                throw JSONField.failure("op", "a push name", opValue)
            }
        default:
            throw JSONField.failure("kind", "control, request, response or push", .string(kind))
        }
    }
}

extension ErrorCode {
    /// The name when this version defines the code.
    public var nameIfKnown: String? {
        Self.allKnown.contains(self) ? self.name : nil
    }
}

extension ErrorBody {
    /// An error body from a code and a message.
    public init(_ code: ErrorCode, _ message: String = "") {
        self.init(code: UInt64(code.rawValue), message: message)
    }

    /// The error code as a typed value.
    public var errorCode: ErrorCode { ErrorCode(rawValue: UInt32(truncatingIfNeeded: self.code)) }
}

/// An error response body can be thrown and carried in `Result` as it is.
extension ErrorBody: Error {}
