import NIOCore
import Synchronization

/// Work that other threads hand to one event loop, run there in one task per batch.
///
/// A store's writer thread answers every write of a committed batch in a row, each on its connection's loop;
/// one `EventLoop.execute` per answer would queue a task and wake the loop (an `eventfd` write) per answer. Posted
/// here instead, the first post of a batch queues one task and the posts behind it only append to a list under a
/// lock nobody holds for longer than a swap, so a commit of hundreds of writes costs each loop one task.
///
/// Order: work runs in the order it was posted, and a post is never overtaken by an `execute` on the same loop
/// made after it by the same thread (the task that runs the post is queued no later than the post itself), so an
/// answer posted here still leaves before an event sent after it.
final class LoopInbox: Sendable {
    typealias Work = @Sendable () -> Void

    private struct State {
        /// Work posted and not yet taken by a drain; non-empty exactly while a drain task is queued.
        var pending: [Work] = []
        /// The storage of the last batch run, emptied, for the next batch (steady batches allocate no list).
        var spare: [Work] = []
    }

    private let eventLoop: any EventLoop
    private let state = Mutex(State())

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    /// Runs `work` on the inbox's loop, after the work posted before it.
    func post(_ work: @escaping Work) {
        let isFirst = self.state.withLock { state in
            state.pending.append(work)
            return state.pending.count == 1
        }
        if isFirst {
            self.eventLoop.execute { self.drain() }
        }
    }

    /// Takes everything posted so far and runs it. A post made while the batch runs finds the list empty and
    /// queues the next drain.
    private func drain() {
        var batch = self.state.withLock { state in
            var batch = state.spare
            state.spare = []
            swap(&batch, &state.pending)
            return batch
        }
        for work in batch { work() }
        batch.removeAll(keepingCapacity: true)
        self.state.withLock { $0.spare = batch }
    }
}

/// One ``LoopInbox`` per event loop of a group.
struct LoopInboxes: Sendable {
    private let inboxes: [ObjectIdentifier: LoopInbox]

    init(group: any EventLoopGroup) {
        var inboxes: [ObjectIdentifier: LoopInbox] = [:]
        for loop in group.makeIterator() {
            inboxes[ObjectIdentifier(loop)] = LoopInbox(eventLoop: loop)
        }
        self.inboxes = inboxes
    }

    /// The inbox of `loop`, when it belongs to the group.
    func inbox(for loop: any EventLoop) -> LoopInbox? {
        self.inboxes[ObjectIdentifier(loop)]
    }
}
