import Synchronization

/// Whether `body` finished by `deadline`; when it did not, it is left running (the caller then closes what it waits
/// on). For the last writes of a stopping node: a query on a connection the server reset may never answer, and a node
/// that cannot reach its database must still stop (the others sweep what it leaves once they see it dead).
func finishes(by deadline: ContinuousClock.Instant, _ body: @escaping @Sendable () async -> Void) async -> Bool {
    let decided = FirstOfTwo()
    return await withCheckedContinuation { continuation in
        decided.set(continuation)
        Task {
            await body()
            decided.resume(true)
        }
        Task {
            try? await Task.sleep(until: deadline, clock: .continuous)
            decided.resume(false)
        }
    }
}

/// A continuation resumed by whichever of two racers comes first.
private final class FirstOfTwo: Sendable {
    private let continuation = Mutex<CheckedContinuation<Bool, Never>?>(nil)

    func set(_ continuation: CheckedContinuation<Bool, Never>) {
        self.continuation.withLock { $0 = continuation }
    }

    func resume(_ value: Bool) {
        self.continuation.withLock { $0.take() }?.resume(returning: value)
    }
}
