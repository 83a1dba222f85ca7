import NIOCore

/// Runs a task's jobs on a NIO event loop: the executor preference of the tasks that verify tokens
/// (``Handshake/verify(_:authority:policy:defaultGrants:nowMillis:)``, renewals), so that jwt-kit's actor and its
/// async calls run on the connection's own loop thread instead of Swift's shared cooperative pool. A verification
/// takes tens of microseconds of CPU; on the pool it would wait behind whatever else the process runs there, and a
/// pool kept busy (two threads on a two-core machine) would hold every login up.
final class EventLoopTaskExecutor: TaskExecutor, @unchecked Sendable {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = self.asUnownedTaskExecutor()
        self.eventLoop.execute { job.runSynchronously(on: executor) }
    }
}
