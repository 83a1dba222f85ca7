import Synchronization

/// An expiry's `expired` outcome, announced exactly once by whichever comes first: the shard's outbox right after the
/// sweep, or the write-back answering the writes of its commit in order
/// (``LocalWrites/expireDue(nowMs:store:expired:)``).
///
/// The second caller waits until the first one's announcement returned. So a write decided after the expiry, whose
/// answer the write-back gives after the expiry's place in the same or an earlier commit, is never reported before
/// the expiry, however late the sweeping thread delivers its outbox (`Protocol/SPEC.md` SB-13.1-9).
final class ExpiryAnnouncement: Sendable {
    private let pending: Mutex<(completion: WriteCompletion, outcome: WriteOutcome)?>

    init(_ completion: @escaping WriteCompletion, _ outcome: WriteOutcome) {
        self.pending = Mutex((completion, outcome))
    }

    /// Announces the expiry unless it was announced already; returns once it has been.
    func announce() {
        self.pending.withLock { pending in
            guard let (completion, outcome) = pending else { return }
            pending = nil
            completion(.success(outcome))
        }
    }

    /// The announcement as a write completion (the outbox's and the pending write's); the result it gets is ignored.
    var completion: WriteCompletion {
        { _ in self.announce() }
    }
}
