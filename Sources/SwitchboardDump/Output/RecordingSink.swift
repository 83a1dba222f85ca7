import Synchronization

/// Keeps every event in memory, for programs that embed the tap proxy and for tests.
public final class RecordingSink: DumpSink {
    private let recorded = Mutex<[DumpEvent]>([])

    /// Creates an empty sink.
    public init() {}

    public func receive(_ event: DumpEvent) {
        self.recorded.withLock { $0.append(event) }
    }

    /// The events received so far, in order.
    public var events: [DumpEvent] {
        self.recorded.withLock { $0 }
    }

    /// Waits until `condition` holds for the events received so far, checking every 10 ms for at most `timeout`.
    ///
    /// - Returns: whether the condition held before the time ran out.
    public func wait(
        timeout: Duration = .seconds(10), until condition: ([DumpEvent]) -> Bool
    ) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition(self.events) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition(self.events)
    }
}
