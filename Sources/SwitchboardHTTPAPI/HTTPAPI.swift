import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle
import SwitchboardServer
import SwitchboardWire

/// The HTTP API (`Docs/http-api.md`): the wire operations a backend calls (storage, locks, presence queries, event
/// publishing, profiles, moderation) as JSON over HTTP on a listener of its own, on Hummingbird.
///
/// Each operation of ``APIOperations/all`` is `POST /v1/<op name>` with the canonical JSON rendering of its request
/// body (`Protocol/SPEC.md` §10), run through the gateway's command areas as a client's request would be
/// (``GatewayOperations``): the same checks, compare-and-set and error codes. The OpenAPI 3.1 document
/// (`Protocol/openapi.json`, generated from `Protocol/schema.json` with these routes) is served at `/openapi.json`.
///
/// Requests carry `Authorization: Bearer <API key or admin token>` (``APIAccess``). With the gateway's TLS settings
/// the listener serves HTTPS with the gateway's certificate (reloads included).
public struct HTTPAPI: GatewayAddOn {
    /// Where and how the API listens.
    public struct Configuration: Sendable {
        /// The address to bind.
        public var host: String
        /// The port (0: any free port, see ``onRunning``).
        public var port: Int
        /// The API keys (none: admin tokens only).
        public var keys: APIKeys
        /// The largest request body accepted, in bytes: the wire's largest frame (1 MiB) by default.
        public var maxBodyBytes = 1 << 20
        /// The webhooks' dead letters, served at `/v1/listWebhookDeadLetters`, `/v1/requeueWebhookDeadLetter` and
        /// `/v1/deleteWebhookDeadLetter` (`Docs/webhooks.md`); nil: no webhooks.
        public var webhooks: (any WebhookAdministration)?
        /// Called with the bound address once the API listens.
        public var onRunning: @Sendable (SocketAddress) -> Void = { _ in }

        /// An API on `host:port` accepting `keys`.
        public init(host: String, port: Int, keys: APIKeys = .none) {
            self.host = host
            self.port = port
            self.keys = keys
        }
    }

    /// The configuration.
    public let configuration: Configuration

    /// An API listening as `configuration` says once the gateway runs it.
    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// The operations the API serves.
    public var operations: Set<Opcode> { Set(APIOperations.all) }

    /// The Hummingbird application serving the API on `operations`.
    ///
    /// - Throws: ``HTTPAPIStartError`` when the API would be open to anyone (open development mode, no API keys) on an
    ///   address that is not loopback, as the wire's listeners refuse to.
    public func makeService(operations: GatewayOperations, logger: Logger) throws -> any Service {
        let configuration = self.configuration
        let access = APIAccess(keys: configuration.keys, operations: operations)
        if access.isOpen, !Self.isLoopback(configuration.host) {
            throw HTTPAPIStartError(
                description: "the HTTP API without API keys in open development mode only listens on loopback, not \(configuration.host)")
        }
        let responder = APIResponder(
            operations: operations, access: access, maxBodyBytes: configuration.maxBodyBytes,
            webhooks: configuration.webhooks)
        let usesTLS = operations.usesTLS
        let server = HTTPServerBuilder { respond in
            let http = HTTP1Channel(responder: respond)
            guard usesTLS else { return http }
            return GatewayTLSChannel(base: http, context: { operations.tlsContext })
        }
        let scheme = usesTLS ? "https" : "http"
        return Application(
            responder: CallbackResponder<BasicRequestContext> { request, _ in await responder.respond(to: request) },
            server: server,
            configuration: ApplicationConfiguration(
                address: .hostname(configuration.host, port: configuration.port), serverName: "switchboard"),
            onServerRunning: { channel in
                guard let address = channel.localAddress else { return }
                logger.info(
                    "switchboard HTTP API started",
                    metadata: ["api": "\(scheme)://\(Self.hostAndPort(address))", "auth": "\(access.description)"])
                configuration.onRunning(address)
            },
            eventLoopGroupProvider: .shared(operations.eventLoops),
            logger: logger)
    }

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
    }

    static func hostAndPort(_ address: SocketAddress) -> String {
        let host = address.ipAddress ?? "\(address)"
        let port = address.port.map(String.init) ?? "?"
        return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}

/// Why the HTTP API did not start.
public struct HTTPAPIStartError: Error, Sendable, CustomStringConvertible {
    public var description: String
}
