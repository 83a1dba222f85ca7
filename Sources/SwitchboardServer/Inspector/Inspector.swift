import NIOCore
import NIOHTTP1
import Synchronization
import SwitchboardWire

/// The live inspector (`Docs/inspector.md`), served by the ``MetricsEndpoint``: `GET /inspector` is one
/// self-contained page (``InspectorPage``) that polls a small JSON API under `/inspector/api/` about once a second:
/// channels with their occupancy, a channel's members with their state and its metadata, a user's channels, state,
/// sessions and metadata, the users online on this node.
///
/// Every API request needs `Authorization: Bearer <admin token>`, verified as a login would be
/// (``InspectorAccess``): 401 without a token or with one that does not verify, 403 with a token that is not an
/// admin's. In open development mode anyone may read, as anyone may log in as an admin there. The page itself holds
/// no data and needs no token. The answers come from the command areas through an ``InternalCaller``
/// (``InspectorQueries``); until the gateway has built them, the API answers 503.
public final class Inspector: Sendable {
    /// What the API reads, once the gateway built it.
    struct Sources: Sendable {
        var caller: InternalCaller
        var sessions: SessionRegistry
        var credentials: GatewayCredentials
    }

    private let sources = Mutex<Sources?>(nil)
    private let nowMillis: @Sendable () -> Int64

    /// An inspector with nothing to read yet (``attach(_:)``).
    init(nowMillis: @escaping @Sendable () -> Int64) {
        self.nowMillis = nowMillis
    }

    /// Gives the inspector the gateway's areas, sessions and credentials: the API answers from now on.
    func attach(_ sources: Sources) {
        self.sources.withLock { $0 = sources }
    }

    /// Whether the endpoint passes `path` (without its query) to the inspector.
    static func serves(_ path: Substring) -> Bool {
        path == "/inspector" || path.hasPrefix("/inspector/")
    }

    /// The answer to `request` (a GET or HEAD of a path ``serves(_:)`` accepts), completed on `eventLoop`.
    func answer(_ request: HTTPRequestHead, path: Substring, on eventLoop: any EventLoop) -> EventLoopFuture<MetricsAnswer> {
        if path == "/inspector" || path == "/inspector/" {
            return eventLoop.makeSucceededFuture(
                MetricsAnswer(
                    status: .ok, contentType: "text/html; charset=utf-8", body: InspectorPage.bytes,
                    headers: Self.pageHeaders))
        }
        let api = "/inspector/api/"
        guard path.hasPrefix(api) else { return eventLoop.makeSucceededFuture(Self.notFound) }
        let name = String(path.dropFirst(api.count))
        guard ["channels", "channel", "user", "users"].contains(name) else {
            return eventLoop.makeSucceededFuture(Self.notFound)
        }
        guard let sources = self.sources.withLock({ $0 }) else {
            return eventLoop.makeSucceededFuture(
                Self.json(status: .serviceUnavailable, InspectorJSON.Failure(ErrorBody(.unavailable, "the gateway is starting"))))
        }
        let authorization = request.headers.first(name: "authorization")
        let query = InspectorQueryString(uri: request.uri)
        let nowMillis = self.nowMillis
        return eventLoop.makeFutureWithTask {
            let identity = await InspectorAccess.identity(
                authorization: authorization, authority: sources.credentials.authority,
                policy: sources.credentials.loginPolicy, nowMillis: nowMillis())
            let session: SessionInfo
            switch identity {
            case .success(let info):
                session = info
            case .failure(let refusal):
                var answer = Self.json(
                    status: HTTPResponseStatus(statusCode: refusal.status), InspectorJSON.Failure(refusal.error))
                if refusal.status == 401 { answer.headers.append(("WWW-Authenticate", #"Bearer realm="switchboard-inspector""#)) }
                return answer
            }
            let queries = InspectorQueries(
                caller: sources.caller, sessions: sources.sessions, session: session, eventLoop: eventLoop)
            do throws(InternalCallError) {
                switch name {
                case "channels": return Self.json(status: .ok, try await queries.channels(query))
                case "channel": return Self.json(status: .ok, try await queries.channel(query))
                case "user": return Self.json(status: .ok, try await queries.user(query))
                default: return Self.json(status: .ok, try queries.users(query))
                }
            } catch {
                return Self.json(status: Self.status(of: error.body.errorCode), InspectorJSON.Failure(error.body))
            }
        }
    }

    /// The HTTP status of an area's error: 400 for a bad argument, 404 for something absent, 403 for a denial, 503
    /// for the rest (an engine unavailable).
    static func status(of code: ErrorCode) -> HTTPResponseStatus {
        switch code.errorClass {
        case .invalidArgument: return .badRequest
        case .notFound: return .notFound
        case .auth: return .forbidden
        default: return .serviceUnavailable
        }
    }

    private static func json(status: HTTPResponseStatus, _ value: some Encodable) -> MetricsAnswer {
        MetricsAnswer(status: status, contentType: "application/json", body: InspectorJSON.encode(value), headers: self.apiHeaders)
    }

    private static let notFound = json(
        status: .notFound,
        InspectorJSON.Failure(ErrorBody(.notFound, "no such inspector path; the API has channels, channel, user, users")))

    /// The API's answers are not cached or sniffed.
    private static let apiHeaders = [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")]

    /// The page runs its own inline script and style and talks to its own origin only; nothing else loads, nothing
    /// frames it, no referrer leaves it.
    private static let pageHeaders = [
        (
            "Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                + "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        ),
        ("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
    ]
}
