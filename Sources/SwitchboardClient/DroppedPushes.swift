import Logging
import Synchronization

/// Counts the elements a client's push streams dropped because their consumer fell behind, and reports them as
/// warnings in the client's log.
///
/// The first drop is reported at once; later ones at most once per `warningInterval`, each warning with the number
/// dropped since the previous one, the total and the streams concerned. Drops that arrive inside an interval are
/// reported when it ends, so every drop appears in some warning.
final class DroppedPushes: Sendable {
    private struct Unreported {
        var count = 0
        var streams: Set<String> = []
        var lastWarning: ContinuousClock.Instant?
        var flushScheduled = false
    }

    private enum Next {
        case warn(Int, [String])
        case scheduleFlush(Duration)
        case wait
    }

    private let total = Atomic<Int>(0)
    private let unreported = Mutex(Unreported())
    private let logger: Logger
    private let bufferLimit: Int
    private let warningInterval: Duration

    init(logger: Logger, bufferLimit: Int, warningInterval: Duration = .seconds(10)) {
        self.logger = logger
        self.bufferLimit = bufferLimit
        self.warningInterval = warningInterval
    }

    /// Elements dropped so far, on every stream.
    var count: Int { self.total.load(ordering: .relaxed) }

    /// Counts one element dropped from `stream`.
    func record(stream: String) {
        self.total.wrappingAdd(1, ordering: .relaxed)
        let now = ContinuousClock.now
        let next: Next = self.unreported.withLock { unreported in
            unreported.count += 1
            unreported.streams.insert(stream)
            if let last = unreported.lastWarning, now - last < self.warningInterval {
                guard !unreported.flushScheduled else { return .wait }
                unreported.flushScheduled = true
                return .scheduleFlush(self.warningInterval - (now - last))
            }
            return Self.take(&unreported, at: now)
        }
        switch next {
        case .warn(let count, let streams):
            self.warn(count, streams)
        case .scheduleFlush(let delay):
            Task {
                try? await Task.sleep(for: delay)
                self.flush()
            }
        case .wait:
            break
        }
    }

    /// Reports what was dropped since the last warning.
    private func flush() {
        let next = self.unreported.withLock { unreported in
            unreported.flushScheduled = false
            return Self.take(&unreported, at: .now)
        }
        if case .warn(let count, let streams) = next { self.warn(count, streams) }
    }

    /// A warning for what `unreported` holds (emptying it), or `.wait` when it holds nothing.
    private static func take(_ unreported: inout Unreported, at now: ContinuousClock.Instant) -> Next {
        guard unreported.count > 0 else { return .wait }
        let next = Next.warn(unreported.count, unreported.streams.sorted())
        unreported.count = 0
        unreported.streams = []
        unreported.lastWarning = now
        return next
    }

    private func warn(_ count: Int, _ streams: [String]) {
        let total = self.count
        self.logger.warning(
            "dropped \(count) pushes (\(total) in all): a push stream's consumer is behind, and the stream keeps only its newest \(self.bufferLimit)",
            metadata: [
                "switchboard.dropped": "\(count)", "switchboard.dropped_total": "\(total)",
                "switchboard.streams": "\(streams.joined(separator: ","))",
                "switchboard.buffer_limit": "\(self.bufferLimit)",
            ])
    }
}
