import Synchronization

/// How far this node's change feed reader got, and what waits for it: a session start's completion and login sync,
/// which must come after every change committed before the start was recorded (so the node's copy holds the kept
/// events the sync sends, and the events held back for the session can be told apart by where they came).
final class FeedProgress: Sendable {
    private struct State {
        var position: Int64 = 0
        var waiters: [(id: Int64, action: @Sendable () -> Void)] = []
    }

    private let state = Mutex(State())

    var value: Int64 { self.state.withLock { $0.position } }

    /// The reader applied every row up to `id`: runs what waited for it, on the reader's task (before the next row).
    func advance(to id: Int64) {
        let due = self.state.withLock { state -> [@Sendable () -> Void] in
            state.position = max(state.position, id)
            guard !state.waiters.isEmpty else { return [] }
            let position = state.position
            let due = state.waiters.filter { $0.id <= position }.map(\.action)
            state.waiters.removeAll { $0.id <= position }
            return due
        }
        for action in due { action() }
    }

    /// Runs `action` once the reader applied every row up to `id` (at once if it did).
    func whenReached(_ id: Int64, _ action: @escaping @Sendable () -> Void) {
        let now = self.state.withLock { state -> Bool in
            guard state.position < id else { return true }
            state.waiters.append((id, action))
            return false
        }
        if now { action() }
    }
}
