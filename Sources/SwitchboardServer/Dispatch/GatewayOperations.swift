import Logging
import NIOCore
import NIOSSL
import ServiceLifecycle
import SwitchboardWire

/// The wire operations of a running gateway, for a server inside the gateway's process that is not a wire listener
/// (the HTTP API, `Docs/http-api.md`): it runs typed requests through the same command areas, the same grant check
/// and the same answers as a client's requests, as a caller it names (``Caller``), without a connection.
///
/// Built by ``GatewayApplication`` for each ``GatewayAddOn`` once the areas exist, with the operations the add-on
/// asked for; every other op answers `unavailable`.
public final class GatewayOperations: Sendable {
    /// Who runs an operation: an identity the add-on vouches for (an API key's name) or the holder of an admin token.
    public struct Caller: Sendable, Hashable {
        let session: SessionInfo

        /// The user the operations run as (a publisher, a lock holder, an author of writes).
        public var userID: String { self.session.userID }

        /// A trusted caller inside the gateway (an API key's holder): an admin named `userID`, every grant.
        public static func trusted(userID: String) -> Caller {
            Caller(session: Self.session(userID: userID, token: nil))
        }

        static func session(userID: String, token: AccessToken?) -> SessionInfo {
            SessionInfo(
                sessionID: "api", connectionID: 0, userID: userID, role: .admin, clientType: .server, deviceID: "api",
                features: [], grants: .unrestricted, tokenID: token?.tokenID, tokenIssuedAt: token?.issuedAt)
        }
    }

    /// Why a token was refused: `status` 401 (no token, or one that does not verify, is revoked or banned) or 403 (a
    /// verified token that is not an admin's), with the wire's error.
    public struct Refusal: Error, Sendable {
        /// 401 or 403.
        public var status: Int
        /// The error as the wire protocol names it.
        public var error: ErrorBody
    }

    private let caller: InternalCaller
    private let credentials: GatewayCredentials
    private let eventLoopGroup: any EventLoopGroup
    private let nowMillis: @Sendable () -> Int64
    /// Whether the gateway's listeners use TLS (``ServerConfiguration/tls`` is set).
    public let usesTLS: Bool
    /// The event loops of the gateway, for servers that run beside it.
    public var eventLoops: any EventLoopGroup { self.eventLoopGroup }

    init(
        caller: InternalCaller, credentials: GatewayCredentials, eventLoopGroup: any EventLoopGroup, usesTLS: Bool,
        nowMillis: @escaping @Sendable () -> Int64
    ) {
        self.caller = caller
        self.credentials = credentials
        self.eventLoopGroup = eventLoopGroup
        self.usesTLS = usesTLS
        self.nowMillis = nowMillis
    }

    /// The TLS context of connections accepted now: the gateway's, replaced when it reloads its certificate (nil
    /// until the gateway has read its files, and without TLS).
    public var tlsContext: NIOSSLContext? { self.credentials.tlsContext }

    /// Whether the gateway verifies no tokens (open development mode: anyone logs in as anyone).
    public var isOpenDevelopmentMode: Bool { self.credentials.authority == nil }

    /// The caller holding `token` (a bearer token): an admin token verified as a login would be (the same keys,
    /// reloads included, and the same bans and revocations), or why it is refused. In open development mode there is
    /// no authority: every token is refused with 401.
    public func admin(token: String) async -> Result<Caller, Refusal> {
        guard let authority = self.credentials.authority else {
            return .failure(Refusal(status: 401, error: ErrorBody(.invalidToken, "the gateway verifies no tokens (open development mode)")))
        }
        let nowMillis = self.nowMillis()
        let verified: AccessToken
        do {
            verified = try await authority.verify(token, now: nowMillis / 1000)
        } catch {
            return .failure(Refusal(status: 401, error: ErrorBody(error.code, error.message)))
        }
        if let refusal = self.credentials.loginPolicy?.refusal(of: verified, userID: verified.userID, nowMillis: nowMillis) {
            return .failure(Refusal(status: 401, error: ErrorBody(refusal.code, refusal.message)))
        }
        guard verified.role == .admin else {
            return .failure(Refusal(status: 403, error: ErrorBody(.permissionDenied, "the API needs an admin token or an API key")))
        }
        return .success(Caller(session: Caller.session(userID: verified.userID, token: verified)))
    }

    /// Runs `request` as `caller` on one of the gateway's loops.
    ///
    /// - Returns: the area's response, or the error a client's request would have got.
    public func run(_ request: Request, as caller: Caller) async -> Result<Response, ErrorBody> {
        do {
            return .success(try await self.caller.call(request, as: caller.session, on: self.eventLoopGroup.next()).get())
        } catch let error as InternalCallError {
            return .failure(error.body)
        } catch {
            return .failure(ErrorBody(.internal, "\(error)"))
        }
    }
}

/// A server that runs beside the gateway in its service group (the HTTP API): ``GatewayApplication`` gives it the
/// gateway's operations once the areas exist, runs the service it makes after the gateway's (so it stops first on
/// shutdown).
public protocol GatewayAddOn: Sendable {
    /// The operations it runs through ``GatewayOperations``.
    var operations: Set<Opcode> { get }

    /// The service to run, on `operations`.
    func makeService(operations: GatewayOperations, logger: Logger) throws -> any Service
}
