import Foundation
import Synchronization

/// What an `AsyncStream` delivered, kept in order by a task that reads it, for steps that wait for an element with
/// a time limit and consume it.
final class Inbox<Element: Sendable>: Sendable {
    /// The elements delivered and not taken yet.
    private final class Buffer: Sendable {
        let elements = Mutex<[Element]>([])
    }

    private let buffer = Buffer()
    private let reader: Task<Void, Never>

    init(_ stream: AsyncStream<Element>) {
        let buffer = self.buffer
        self.reader = Task {
            for await element in stream { buffer.elements.withLock { $0.append(element) } }
        }
    }

    deinit { self.reader.cancel() }

    /// Takes elements in arrival order until `accept` returns a value for one (that element and the ones before it
    /// are consumed), waiting for more until `deadline`; nil when none was accepted by then.
    func take<Result: Sendable>(until deadline: Date, _ accept: (Element) -> Result?) async -> Result? {
        while true {
            let found: Result? = self.buffer.elements.withLock { elements in
                while !elements.isEmpty {
                    let element = elements.removeFirst()
                    if let result = accept(element) { return result }
                }
                return nil
            }
            if let found { return found }
            if Date() >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}
