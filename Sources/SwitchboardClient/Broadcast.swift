import Synchronization

/// One source of elements fanned out to a lifetime stream and to any number of streams made later.
///
/// The lifetime stream exists from the start, so nothing is lost before its consumer begins reading; it is meant
/// for one consumer (an `AsyncStream` hands each element to one iterator only). ``makeStream()`` gives further
/// consumers their own stream of what arrives from then on. Each stream keeps the newest `bufferLimit` elements
/// its consumer has not read yet and drops the oldest beyond. Yielding never blocks.
///
/// With a `drops` counter, every element a stream drops is counted there, under the broadcast's `name`: those of
/// made streams always, those of the lifetime stream once it has been asked for (``lifetime``). A lifetime stream
/// nobody asked for has no consumer to fall behind; it keeps its newest elements for one that may come.
final class Broadcast<Element: Sendable>: Sendable {
    private struct Subscribers {
        var next = 0
        var sinks: [Int: AsyncStream<Element>.Continuation] = [:]
        var finished = false
    }

    private let lifetimeStream: AsyncStream<Element>
    private let lifetimeSink: AsyncStream<Element>.Continuation
    private let lifetimeClaimed = Atomic<Bool>(false)
    private let bufferLimit: Int
    private let subscribers = Mutex(Subscribers())
    private let name: String
    private let drops: DroppedPushes?

    /// - Parameters:
    ///   - withLifetimeStream: false for a broadcast only read through ``makeStream()``, which then keeps nothing
    ///     for a consumer that does not exist.
    ///   - name: the stream's name in drop warnings.
    ///   - drops: where dropped elements are counted; nil to not count them.
    init(bufferLimit: Int, withLifetimeStream: Bool = true, name: String = "", drops: DroppedPushes? = nil) {
        self.bufferLimit = max(bufferLimit, 1)
        self.name = name
        self.drops = drops
        (self.lifetimeStream, self.lifetimeSink) = AsyncStream.makeStream(
            bufferingPolicy: .bufferingNewest(self.bufferLimit))
        if !withLifetimeStream { self.lifetimeSink.finish() }
    }

    /// The stream that lives as long as the broadcast (an empty, finished one when made without).
    var lifetime: AsyncStream<Element> {
        self.lifetimeClaimed.store(true, ordering: .relaxed)
        return self.lifetimeStream
    }

    /// A new stream of the elements yielded from now on; it finishes when the broadcast does.
    func makeStream() -> AsyncStream<Element> {
        let (stream, sink) = AsyncStream<Element>.makeStream(bufferingPolicy: .bufferingNewest(self.bufferLimit))
        let key: Int? = self.subscribers.withLock { subscribers in
            guard !subscribers.finished else { return nil }
            let key = subscribers.next
            subscribers.next += 1
            subscribers.sinks[key] = sink
            return key
        }
        guard let key else {
            sink.finish()
            return stream
        }
        sink.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.sinks.removeValue(forKey: key) }
        }
        return stream
    }

    func yield(_ element: Element) {
        if case .dropped = self.lifetimeSink.yield(element), self.lifetimeClaimed.load(ordering: .relaxed) {
            self.drops?.record(stream: self.name)
        }
        // Continuations are yielded to outside the lock: a consumer's termination handler takes it.
        let sinks = self.subscribers.withLock { Array($0.sinks.values) }
        for sink in sinks {
            if case .dropped = sink.yield(element) { self.drops?.record(stream: self.name) }
        }
    }

    func finish() {
        self.lifetimeSink.finish()
        let sinks = self.subscribers.withLock { subscribers in
            subscribers.finished = true
            let sinks = Array(subscribers.sinks.values)
            subscribers.sinks.removeAll()
            return sinks
        }
        for sink in sinks { sink.finish() }
    }
}
