import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Catches Ctrl-C (SIGINT) and SIGTERM while a long-running command (watch, shell, provider serve) is active, so it
/// ends with a clean logout instead of being killed; the default handling comes back on `cancel()`.
public final class InterruptSignals: Sendable {
    private static let signals: [Int32] = [SIGINT, SIGTERM]
    private let sources: Mutex<[any DispatchSourceSignal]>

    /// Starts catching; `handler` runs on a background queue for each signal.
    public init(_ handler: @escaping @Sendable (Int32) -> Void) {
        var sources: [any DispatchSourceSignal] = []
        for number in Self.signals {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { handler(number) }
            source.resume()
            sources.append(source)
        }
        self.sources = Mutex(sources)
    }

    /// Stops catching and restores the default handling.
    public func cancel() {
        self.sources.withLock { sources in
            for source in sources { source.cancel() }
            sources.removeAll()
        }
        for number in Self.signals { signal(number, SIG_DFL) }
    }

    /// An async stream of caught signals; catching ends when the stream's consumer stops.
    public static func stream() -> AsyncStream<Int32> {
        let (stream, continuation) = AsyncStream<Int32>.makeStream()
        let signals = InterruptSignals { continuation.yield($0) }
        continuation.onTermination = { _ in signals.cancel() }
        return stream
    }
}
