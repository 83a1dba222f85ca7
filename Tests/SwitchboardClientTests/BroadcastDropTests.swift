import Testing

@testable import SwitchboardClient

/// A client's push streams count what they drop for a consumer that is behind.
@Suite struct BroadcastDropTests {
    static func drops(bufferLimit: Int) -> DroppedPushes {
        // The configuration's default logger discards everything: these tests count, the server tests read logs.
        let configuration = ClientConfiguration(endpoint: .unix(path: "/nonexistent"), userID: "tony")
        return DroppedPushes(logger: configuration.logger, bufferLimit: bufferLimit)
    }

    @Test func aMadeStreamKeepsTheNewestElementsAndCountsTheOthersAsDropped() async {
        let drops = Self.drops(bufferLimit: 2)
        let broadcast = Broadcast<Int>(bufferLimit: 2, name: "numbers", drops: drops)
        let stream = broadcast.makeStream()
        for number in 1...5 { broadcast.yield(number) }
        #expect(drops.count == 3)
        broadcast.finish()
        var received: [Int] = []
        for await number in stream { received.append(number) }
        #expect(received == [4, 5])
    }

    @Test func aLifetimeStreamCountsDropsOnlyOnceItWasAskedFor() async {
        let drops = Self.drops(bufferLimit: 2)
        let broadcast = Broadcast<Int>(bufferLimit: 2, name: "numbers", drops: drops)
        for number in 1...5 { broadcast.yield(number) }
        #expect(drops.count == 0, "nobody asked for the stream: there is no consumer to fall behind")
        let stream = broadcast.lifetime
        broadcast.yield(6)
        #expect(drops.count == 1)
        broadcast.finish()
        var received: [Int] = []
        for await number in stream { received.append(number) }
        #expect(received == [5, 6])
    }

    @Test func aConsumerThatKeepsUpDropsNothing() async {
        let drops = Self.drops(bufferLimit: 2)
        let broadcast = Broadcast<Int>(bufferLimit: 2, name: "numbers", drops: drops)
        var iterator = broadcast.makeStream().makeAsyncIterator()
        for number in 1...100 {
            broadcast.yield(number)
            #expect(await iterator.next() == number)
        }
        #expect(drops.count == 0)
    }
}
