#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore
import SwitchboardWire

/// State every connection shares: configuration, sessions, handlers, authentication, metrics.
final class GatewayCore: Sendable {
    let configuration: ServerConfiguration
    let registry: SessionRegistry
    /// The TLS context and token authority of new connections, replaceable while the gateway runs.
    let credentials: GatewayCredentials
    /// The authority that verifies tokens now (nil: open development mode).
    var authority: TokenAuthority? { self.credentials.authority }
    let metrics: GatewayMetrics
    let logger: Logger
    let observers: [any SessionObserver]
    /// Handlers indexed by op (0...63).
    private let handlers: [(any RequestHandler)?]
    /// Handlers that answer an op from its encoded body, indexed by op (0...63).
    private let encodedReaders: [(any EncodedReadHandler)?]
    /// Server time in ms since the Unix epoch (injectable for tests).
    let nowMillis: @Sendable () -> Int64
    /// Each event loop's end-of-tick flush list.
    let flushBatches: FlushBatches
    /// Each event loop's inbox for answers completed on other threads.
    let inboxes: LoopInboxes

    /// Creates the shared state; `handlers` are the command areas, behind the session area (logout, renewToken),
    /// which every gateway has; `credentials` nil: the configuration's token secret, no TLS.
    init(
        configuration: ServerConfiguration, registry: SessionRegistry, handlers: [any RequestHandler],
        observers: [any SessionObserver], metrics: GatewayMetrics, logger: Logger,
        nowMillis: @escaping @Sendable () -> Int64, flushBatches: FlushBatches, inboxes: LoopInboxes,
        credentials: GatewayCredentials? = nil, loginPolicy: (any LoginPolicy)? = nil
    ) {
        // `loginPolicy` is held by the credentials, where ``SwitchboardGateway/setLoginPolicy(_:)`` can replace it.
        let credentials = credentials ?? GatewayCredentials(configuration)
        if let loginPolicy { credentials.loginPolicy = loginPolicy }
        self.configuration = configuration
        self.registry = registry
        self.credentials = credentials
        self.metrics = metrics
        self.logger = logger
        self.observers = observers
        self.nowMillis = nowMillis
        self.flushBatches = flushBatches
        self.inboxes = inboxes
        var table: [(any RequestHandler)?] = Array(repeating: nil, count: 64)
        var readers: [(any EncodedReadHandler)?] = Array(repeating: nil, count: 64)
        for handler in [SessionArea(credentials: credentials, observers: observers, defaultGrants: configuration.defaultGrants)] + handlers {
            let reader = handler as? any EncodedReadHandler
            let encoded = Set(reader?.encodedReadOperations ?? [])
            for op in handler.operations {
                table[Int(op.rawValue)] = handler
                readers[Int(op.rawValue)] = encoded.contains(op) ? reader : nil
            }
        }
        self.handlers = table
        self.encodedReaders = readers
    }

    /// The handler that may answer `op` from its encoded body, if any.
    func encodedReader(for op: UInt8) -> (any EncodedReadHandler)? {
        op < 64 ? self.encodedReaders[Int(op)] : nil
    }

    func handler(for op: Opcode) -> (any RequestHandler)? {
        self.handlers[Int(op.rawValue)]
    }
}

/// The wall clock in milliseconds since the Unix epoch.
@Sendable
public func systemNowMillis() -> Int64 {
    var spec = timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
}
