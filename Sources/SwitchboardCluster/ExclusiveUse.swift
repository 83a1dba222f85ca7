import Synchronization

/// Lends something to one task at a time, in the order they asked: a connection whose transactions must not
/// interleave with another task's statements (a `BEGIN` … `COMMIT` would otherwise take in whatever another task sent
/// on the same connection meanwhile).
final class ExclusiveUse: Sendable {
    private let state = Mutex<(busy: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    /// Runs `body` once no other `body` runs, and before any asked for later.
    func run<T>(_ body: () async throws -> T) async throws -> T {
        await self.acquire()
        defer { self.release() }
        return try await body()
    }

    private func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = self.state.withLock { state -> Bool in
                if state.busy {
                    state.waiting.append(continuation)
                    return false
                }
                state.busy = true
                return true
            }
            if granted { continuation.resume() }
        }
    }

    private func release() {
        let next = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiting.isEmpty else {
                state.busy = false
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }
}
