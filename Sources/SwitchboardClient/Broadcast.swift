import Synchronization

/// One source of elements fanned out to a lifetime stream and to any number of streams made later.
///
/// The lifetime stream exists from the start, so nothing is lost before its consumer begins reading; it is meant
/// for one consumer (an `AsyncStream` hands each element to one iterator only). ``makeStream()`` gives further
/// consumers their own stream of what arrives from then on. Each stream keeps the newest `bufferLimit` elements
/// its consumer has not read yet. Yielding never blocks.
final class Broadcast<Element: Sendable>: Sendable {
    private struct Subscribers {
        var next = 0
        var sinks: [Int: AsyncStream<Element>.Continuation] = [:]
        var finished = false
    }

    /// The stream that lives as long as the broadcast (an empty, finished one when made without).
    let lifetime: AsyncStream<Element>
    private let lifetimeSink: AsyncStream<Element>.Continuation
    private let bufferLimit: Int
    private let subscribers = Mutex(Subscribers())

    /// - Parameter withLifetimeStream: false for a broadcast only read through ``makeStream()``, which then keeps
    ///   nothing for a consumer that does not exist.
    init(bufferLimit: Int, withLifetimeStream: Bool = true) {
        self.bufferLimit = max(bufferLimit, 1)
        (self.lifetime, self.lifetimeSink) = AsyncStream.makeStream(
            bufferingPolicy: .bufferingNewest(self.bufferLimit))
        if !withLifetimeStream { self.lifetimeSink.finish() }
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
        self.lifetimeSink.yield(element)
        // Continuations are yielded to outside the lock: a consumer's termination handler takes it.
        let sinks = self.subscribers.withLock { Array($0.sinks.values) }
        for sink in sinks { sink.yield(element) }
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
