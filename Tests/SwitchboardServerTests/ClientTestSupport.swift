import Foundation
import Logging
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// Where a full gateway keeps its data and listens, so that a second gateway can take over from a first.
///
/// A test that makes one removes it at its end (`defer { place.remove() }`), after the last gateway on it stopped.
struct FullGatewayPlace: Sendable {
    /// The metadata database; the event and profile stores sit next to it (as `switchboard serve` puts them).
    let database = TemporaryPath("sb-client", suffix: ".sqlite")
    /// The Unix socket.
    let unixSocket = temporarySocket()

    var databasePath: String { self.database.path }
    var unixSocketPath: String { self.unixSocket.path }

    /// Removes the databases with their SQLite files, and the socket.
    func remove() {
        self.database.remove()
        self.unixSocket.remove()
    }
}

/// Runs `body` against a gateway with every area, built by ``GatewayApplication`` as `switchboard serve` builds
/// it: storage and locks, presence, events, profiles, each on its SQLite file at `place`. Stores are flushed and
/// closed afterwards. Without a `place` the gateway gets a fresh one, removed afterwards; a given `place` is the
/// caller's to remove. `application` changes the application's configuration last (a metrics endpoint).
func withFullGateway<T: Sendable>(
    at place: FullGatewayPlace? = nil,
    secret: [UInt8]? = nil,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    application configureApplication: (inout GatewayApplication.Configuration) -> Void = { _ in },
    _ body: @Sendable (RunningGateway) async throws -> T
) async throws -> T {
    guard let place else {
        let place = FullGatewayPlace()
        defer { place.remove() }
        return try await withFullGateway(
            at: place, secret: secret, configure: configure, application: configureApplication, body)
    }
    return try await withGateway(
        { configuration in
            configuration.unixSocketPath = place.unixSocketPath
            configuration.tokenSecret = secret
            configure(&configuration)
        },
        application: { application in
            application.areas = .all
            application.useDatabase(at: place.databasePath)
            application.presence.presenceTimeout = .seconds(5)
            application.eventGracePeriod = .milliseconds(200)
            application.providerTimeout = .seconds(3)
            configureApplication(&application)
        }, body)
}

/// Creates a client of `gateway` over `transport`, with quick reconnects for tests.
func makeClient(
    _ gateway: RunningGateway, _ transport: Transport, user: String,
    policy: ReconnectPolicy = .quick, tokenProvider: SwitchboardClient.TokenProvider? = nil,
    configure: (inout ClientConfiguration) -> Void = { _ in }
) -> SwitchboardClient {
    var configuration = ClientConfiguration(endpoint: gateway.endpoint(transport), userID: user)
    configuration.requestTimeout = .seconds(20)
    configure(&configuration)
    return SwitchboardClient(configuration: configuration, reconnectPolicy: policy, tokenProvider: tokenProvider)
}

extension ReconnectPolicy {
    /// 50 ms doubling to 500 ms: quick enough for tests, still backing off.
    static let quick = ReconnectPolicy(initialDelay: .milliseconds(50), maxDelay: .milliseconds(500), jitter: 0.1)
}

/// Collects a stream's elements in the background, so a test can wait for them without consuming the stream
/// itself (cancelling a task that waits on an `AsyncStream` would end the stream).
final class Recorder<Element: Sendable>: Sendable {
    private final class Box: Sendable {
        let items = Mutex<[Element]>([])
        let finished = Atomic<Bool>(false)
    }

    private let box = Box()
    private let task: Task<Void, Never>

    init(_ stream: AsyncStream<Element>) {
        let box = self.box
        self.task = Task {
            for await element in stream { box.items.withLock { $0.append(element) } }
            box.finished.store(true, ordering: .sequentiallyConsistent)
        }
    }

    deinit { self.task.cancel() }

    /// Everything received so far.
    var all: [Element] { self.box.items.withLock { $0 } }

    /// Whether the stream has finished.
    var isFinished: Bool { self.box.finished.load(ordering: .sequentiallyConsistent) }

    /// Waits until `condition` holds for what was received, at most `seconds`; returns what was received.
    @discardableResult
    func wait(seconds: Double = 15, until condition: ([Element]) -> Bool) async -> [Element] {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, !condition(self.all) { try? await Task.sleep(for: .milliseconds(10)) }
        return self.all
    }

    /// The first element matching `predicate`, waiting at most `seconds`.
    func first(seconds: Double = 15, where predicate: (Element) -> Bool) async -> Element? {
        await self.wait(seconds: seconds) { $0.contains(where: predicate) }.first(where: predicate)
    }

    /// Waits until the stream finishes, at most `seconds`; returns whether it did.
    func waitUntilFinished(seconds: Double = 15) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, !self.isFinished { try? await Task.sleep(for: .milliseconds(10)) }
        return self.isFinished
    }
}

/// Expects `body` to throw a ``SwitchboardClientError`` with `code` (and `kind`, if given); returns it.
@discardableResult
func expectClientError(
    _ code: ErrorCode, kind: SwitchboardClientError.Kind? = nil,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async -> SwitchboardClientError? {
    do {
        try await body()
        Issue.record("expected error \(code), got success", sourceLocation: sourceLocation)
        return nil
    } catch let error as SwitchboardClientError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        if let kind { #expect(error.kind == kind, "\(error)", sourceLocation: sourceLocation) }
        return error
    } catch {
        Issue.record("expected a SwitchboardClientError, got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

/// Polls `condition` until it holds, at most `seconds`.
func eventually(seconds: Double = 15, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}

extension ConnectionEvent {
    var isConnected: Bool {
        if case .connected = self { return true }
        return false
    }

    var isReconnecting: Bool {
        if case .reconnecting = self { return true }
        return false
    }

    var disconnection: Disconnection? {
        if case .disconnected(let disconnection) = self { return disconnection }
        return nil
    }

    var restoreReport: RestoreReport? {
        if case .restored(let report) = self { return report }
        return nil
    }
}

/// Keeps what a logger made with ``logger`` logs, for tests that check a client's log.
final class LogCapture: Sendable {
    struct Record: Sendable {
        var level: Logger.Level
        var message: String
        /// The logger's metadata merged with the call's.
        var metadata: Logger.Metadata
    }

    private struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var metadataProvider: Logger.MetadataProvider?
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { self.metadata[key] }
            set { self.metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let metadata = self.metadata.merging(event.metadata ?? [:]) { $1 }
            let record = Record(level: event.level, message: "\(event.message)", metadata: metadata)
            self.capture.records.withLock { $0.append(record) }
        }
    }

    private let records = Mutex<[Record]>([])

    /// A logger whose records this capture keeps, every level included.
    var logger: Logger { Logger(label: "switchboard.client", factory: { _ in Handler(capture: self) }) }

    /// Everything logged so far.
    var all: [Record] { self.records.withLock { $0 } }

    /// The first record matching `predicate`, waiting at most `seconds`.
    func first(seconds: Double = 15, where predicate: (Record) -> Bool) async -> Record? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, !self.all.contains(where: predicate) { try? await Task.sleep(for: .milliseconds(10)) }
        return self.all.first(where: predicate)
    }
}
