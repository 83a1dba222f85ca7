import SwitchboardClient
import SwitchboardWire

/// Prints a session's pushes until a count or a duration is reached, a signal arrives or the connection closes.
struct PushStreamer: Sendable {
    /// Why the stream of pushes stopped.
    enum End: Sendable, Equatable {
        case countReached
        case timeUp
        case interrupted
        case connectionClosed
        case cancelled

        /// The exit status: success unless the server closed the connection.
        func status(of session: CommandSession) async -> ExitStatus {
            guard self == .connectionClosed else { return .success }
            return await session.reportClosedConnection()
        }
    }

    let session: CommandSession
    let count: Int?
    let duration: Double?
    /// Called for each push after it was printed (the provider answers requests here).
    var onPush: (@Sendable (Push) async -> Void)?

    init(session: CommandSession, count: Int?, duration: Double?, onPush: (@Sendable (Push) async -> Void)? = nil) {
        self.session = session
        self.count = count
        self.duration = duration
        self.onPush = onPush
    }

    func run() async -> End {
        await withTaskGroup(of: End.self) { group in
            group.addTask {
                var printed = 0
                for await push in self.session.connection.pushes {
                    self.session.show(push)
                    await self.onPush?(push)
                    printed += 1
                    if let count = self.count, printed >= count { return .countReached }
                }
                return Task.isCancelled ? .cancelled : .connectionClosed
            }
            group.addTask {
                for await _ in InterruptSignals.stream() { return .interrupted }
                return .cancelled
            }
            if let duration = self.duration {
                group.addTask {
                    do {
                        try await Task.sleep(for: .milliseconds(Int64(duration * 1000)))
                        return .timeUp
                    } catch {
                        return .cancelled
                    }
                }
            }
            var end = End.cancelled
            while let next = await group.next() {
                if next != .cancelled {
                    end = next
                    break
                }
            }
            group.cancelAll()
            return end
        }
    }
}
