import NIOCore

/// The connections of one event loop that have output waiting for the end of the current tick.
///
/// One task per tick flushes all of them, instead of one task per connection: a push fanned out to thousands of
/// sessions on a loop costs one scheduled task, not thousands of closures. Used only on its event loop.
final class FlushBatch {
    private let eventLoop: any EventLoop
    private var pending: [ConnectionHandler] = []
    private var scheduled = false

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    /// Flushes `handler` at the end of this tick (once, however often it is added before then).
    func add(_ handler: ConnectionHandler) {
        self.pending.append(handler)
        guard !self.scheduled else { return }
        self.scheduled = true
        self.eventLoop.assumeIsolated().execute { self.run() }
    }

    private func run() {
        self.scheduled = false
        let handlers = self.pending
        self.pending.removeAll(keepingCapacity: true)
        for handler in handlers { handler.flushScheduledOutput() }
    }
}

/// One ``FlushBatch`` per event loop of a group, each made on its loop when first needed.
struct FlushBatches: Sendable {
    private let boxes: [ObjectIdentifier: NIOLoopBoundBox<FlushBatch?>]

    init(group: any EventLoopGroup) {
        var boxes: [ObjectIdentifier: NIOLoopBoundBox<FlushBatch?>] = [:]
        for loop in group.makeIterator() {
            boxes[ObjectIdentifier(loop)] = .makeEmptyBox(valueType: FlushBatch.self, eventLoop: loop)
        }
        self.boxes = boxes
    }

    /// The batch of `loop`, when it belongs to the group. Call on `loop`.
    func batch(for loop: any EventLoop) -> FlushBatch? {
        guard let box = self.boxes[ObjectIdentifier(loop)] else { return nil }
        if let batch = box.value { return batch }
        let batch = FlushBatch(eventLoop: loop)
        box.value = batch
        return batch
    }
}
