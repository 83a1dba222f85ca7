import Hummingbird
import HummingbirdCore
import NIOCore
import SwitchboardServer
import SwitchboardWire

/// Answers the API's requests: `GET /openapi.json` with the document, `POST /v1/<op>` by running the op as the
/// caller (``APIAccess``) through ``GatewayOperations`` (also `GET` for an op that takes nothing, `GET /v1/info`);
/// everything else with a JSON error.
///
/// A success is 200 with the response body's canonical JSON rendering; a failure is the wire's ErrorBody rendered
/// the same way with the error's `name` after its `code`, under the status ``APIOperations/status(of:)`` gives the
/// code.
/// Hummingbird's request and response (the wire has types of the same names).
typealias HTTPAPIRequest = HummingbirdCore.Request
typealias HTTPAPIResponse = HummingbirdCore.Response

struct APIResponder: Sendable {
    let operations: GatewayOperations
    let access: APIAccess
    let maxBodyBytes: Int
    /// The webhooks' dead letters (nil: no webhooks, their routes answer `unknownOperation`).
    let webhooks: (any WebhookAdministration)?
    /// The operations by path.
    private let routes: [String: Opcode]

    init(operations: GatewayOperations, access: APIAccess, maxBodyBytes: Int, webhooks: (any WebhookAdministration)? = nil) {
        self.operations = operations
        self.access = access
        self.maxBodyBytes = maxBodyBytes
        self.webhooks = webhooks
        var routes: [String: Opcode] = [:]
        for op in APIOperations.all { routes[APIOperations.pathPrefix + op.name] = op }
        self.routes = routes
    }

    func respond(to request: HTTPAPIRequest) async -> HTTPAPIResponse {
        let path = request.uri.path
        if path == APIOperations.documentPath {
            guard request.method == .get || request.method == .head else { return Self.methodNotAllowed("GET") }
            return Self.document
        }
        let webhookRoute = self.webhooks != nil && WebhookRoutes.paths.contains(path)
        let op = self.routes[path]
        guard op != nil || webhookRoute else {
            return Self.failure(ErrorBody(.unknownOperation, "no operation at \(path); the API's operations are in \(APIOperations.documentPath)"))
        }
        // An operation that takes nothing (info) also answers GET, as a POST with an empty object.
        let gettable = op.map { APIOperations.gettable.contains($0) } ?? false
        let byGet = gettable && request.method == .get
        guard request.method == .post || byGet else {
            return Self.methodNotAllowed(gettable ? "GET, POST" : "POST")
        }
        let caller: GatewayOperations.Caller
        switch await self.access.caller(authorization: request.headers[.authorization]) {
        case .success(let found):
            caller = found
        case .failure(let refusal):
            var response = Self.failure(refusal.error, status: refusal.status)
            if refusal.status == 401 { response.headers[.wwwAuthenticate] = #"Bearer realm="switchboard-api""# }
            return response
        }
        let body = request.body
        var bytes = ByteBuffer(string: "{}")
        if !byGet {
            do {
                bytes = try await body.collect(upTo: self.maxBodyBytes)
            } catch {
                return Self.failure(ErrorBody(.frameTooLarge, "the body is larger than \(self.maxBodyBytes) bytes"))
            }
        }
        if let webhooks = self.webhooks, webhookRoute {
            // Every caller that passed ``APIAccess`` is an API key or an admin: both may manage dead letters.
            switch Self.parseJSON(bytes) {
            case .failure(let error): return Self.failure(error)
            case .success(let json):
                switch await WebhookRoutes.respond(path: path, body: json, webhooks: webhooks) {
                case .success(let answer): return Self.json(.ok, answer)
                case .failure(let error): return Self.failure(error)
                }
            }
        }
        guard let op else { return Self.failure(ErrorBody(.unknownOperation, "no operation at \(path)")) }
        let wireRequest: SwitchboardWire.Request
        switch Self.decode(op, bytes) {
        case .success(let decoded): wireRequest = decoded
        case .failure(let error): return Self.failure(error)
        }
        if case .acquireLock(let lock) = wireRequest, lock.retry {
            // A waiting acquire needs a session to wait for and to cancel with; an HTTP caller polls instead.
            return Self.failure(ErrorBody(.invalidArgument, "retry needs a session: call acquireLock again instead"))
        }
        switch await self.operations.run(wireRequest, as: caller) {
        case .success(let response):
            return Self.json(.ok, response.jsonBody)
        case .failure(let error):
            return Self.failure(error)
        }
    }

    /// The request of `op` whose JSON body is `bytes`: malformedBody for JSON that does not parse or does not
    /// render a request of `op`, invalidUtf8 for bytes that are not UTF-8.
    static func decode(_ op: Opcode, _ bytes: ByteBuffer) -> Result<SwitchboardWire.Request, ErrorBody> {
        let json: JSONValue
        switch Self.parseJSON(bytes) {
        case .success(let parsed): json = parsed
        case .failure(let error): return .failure(error)
        }
        do {
            return .success(try SwitchboardWire.Request.fromJSON(op, body: json))
        } catch {
            return .failure(ErrorBody(error.code, error.message))
        }
    }

    /// The JSON object `bytes` hold: malformedBody for JSON that does not parse or is not an object, invalidUtf8 for
    /// bytes that are not UTF-8.
    static func parseJSON(_ bytes: ByteBuffer) -> Result<JSONValue, ErrorBody> {
        let view = bytes.readableBytesView
        guard let text = String(validating: view, as: UTF8.self) else {
            return .failure(ErrorBody(.invalidUtf8, "the body is not UTF-8"))
        }
        let json: JSONValue
        do {
            json = try JSONValue.parse(text)
        } catch {
            return .failure(ErrorBody(.malformedBody, "the body is not JSON: \(error.description)"))
        }
        guard case .object = json else {
            return .failure(ErrorBody(.malformedBody, "the body must be a JSON object"))
        }
        return .success(json)
    }

    /// `error` as a JSON response: its status, its fields with its name after its code.
    static func failure(_ error: ErrorBody, status: Int? = nil) -> HTTPAPIResponse {
        var rendered = error.jsonValue
        if case .object(var members) = rendered {
            members.insert(("name", .string(error.errorCode.nameIfKnown ?? "unknown")), at: min(1, members.count))
            rendered = .object(members)
        }
        return Self.json(.init(code: status ?? APIOperations.status(of: error.errorCode)), rendered)
    }

    static func json(_ status: HTTPResponse.Status, _ value: JSONValue) -> HTTPAPIResponse {
        self.json(status, text: value.description)
    }

    static func json(_ status: HTTPResponse.Status, text: String) -> HTTPAPIResponse {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        return HTTPAPIResponse(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    static func methodNotAllowed(_ allowed: String) -> HTTPAPIResponse {
        var response = Self.json(
            .methodNotAllowed,
            ErrorBody(.unknownOperation, "this path answers \(allowed) only").jsonValue.withName("unknownOperation"))
        response.headers[.allow] = allowed
        return response
    }

    private static let document = Self.json(.ok, text: APIOperations.document)
}

extension JSONValue {
    fileprivate func withName(_ name: String) -> JSONValue {
        guard case .object(var members) = self else { return self }
        members.insert(("name", .string(name)), at: min(1, members.count))
        return .object(members)
    }
}
