import Dispatch
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import SwitchboardServer

/// What the posted work saw: who posted it, its place in that poster's sequence, and whether it ran on the loop.
private final class RunLog: Sendable {
    struct Entry: Sendable {
        var poster: Int
        var index: Int
        var onLoop: Bool
    }

    private let entries = Mutex<[Entry]>([])

    func record(_ entry: Entry) { self.entries.withLock { $0.append(entry) } }
    var all: [Entry] { self.entries.withLock { $0 } }
}

@Suite("Loop inbox: answers completed on other threads reach their event loop")
struct LoopInboxTests {
    @Test func workPostedFromOtherThreadsRunsOnTheLoopInEachPostersOrder() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let inbox = LoopInbox(eventLoop: loop)
        let log = RunLog()
        let posters = 3
        let postsEach = 5_000
        DispatchQueue.concurrentPerform(iterations: posters) { poster in
            for index in 0..<postsEach {
                inbox.post { log.record(.init(poster: poster, index: index, onLoop: loop.inEventLoop)) }
            }
        }
        // Everything posted before this task was queued ran before it.
        try await loop.submit {}.get()
        let entries = log.all
        #expect(entries.count == posters * postsEach)
        #expect(entries.allSatisfy { $0.onLoop })
        for poster in 0..<posters {
            let indices = entries.filter { $0.poster == poster }.map(\.index)
            #expect(indices == Array(0..<postsEach))
        }
        try await group.shutdownGracefully()
    }

    @Test func aPostIsNotOvertakenByATaskTheSameThreadQueuesAfterIt() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let inbox = LoopInbox(eventLoop: loop)
        let log = RunLog()
        // An answer posted, then an event for the same connection sent with execute: the answer leaves first,
        // whether the inbox's drain task was queued by this post, queued earlier, or is running meanwhile.
        DispatchQueue.global().sync {
            for index in 0..<2_000 {
                inbox.post { log.record(.init(poster: 0, index: index, onLoop: true)) }
                loop.execute { log.record(.init(poster: 1, index: index, onLoop: true)) }
            }
        }
        try await loop.submit {}.get()
        let entries = log.all
        #expect(entries.count == 4_000)
        var answered = -1
        for entry in entries {
            if entry.poster == 0 {
                answered = entry.index
            } else {
                #expect(answered >= entry.index, "event \(entry.index) left before its answer")
            }
        }
        try await group.shutdownGracefully()
    }
}
