import NIOCore
@testable import SwitchboardServer
import Testing

/// The connection's table of requests in flight: the same answers as a `Dictionary` of id to arrival, under any
/// order of arrivals and answers, with ids that collide in the table.
@Suite struct InFlightRequestsTests {
    static func at(_ nanoseconds: Int) -> NIODeadline { .uptimeNanoseconds(UInt64(nanoseconds)) }

    @Test func anEmptyTableHoldsNothingAndNoStorage() {
        var table = InFlightRequests()
        #expect(table.isEmpty && table.count == 0 && table.capacity == 0)
        #expect(!table.contains(1) && table[1] == nil)
        #expect(table.removeValue(forKey: 1) == nil)
        table.removeAll()
        #expect(table.capacity == 0)
    }

    @Test func aRequestIsFoundUntilItIsRemovedOnce() {
        var table = InFlightRequests()
        table.insert(7, arrival: Self.at(70))
        #expect(table.contains(7) && table[7] == Self.at(70) && table.count == 1)
        #expect(!table.contains(8))
        #expect(table.removeValue(forKey: 7) == Self.at(70))
        #expect(table.removeValue(forKey: 7) == nil, "a second removal finds nothing")
        #expect(table.isEmpty && !table.contains(7))
    }

    @Test func insertingAnIdAgainReplacesItsArrival() {
        var table = InFlightRequests()
        table.insert(3, arrival: Self.at(1))
        table.insert(3, arrival: Self.at(2))
        #expect(table.count == 1 && table[3] == Self.at(2))
    }

    @Test func theTableGrowsAndKeepsEveryRequest() {
        var table = InFlightRequests()
        for id in UInt32(1)...1_000 { table.insert(id, arrival: Self.at(Int(id) * 10)) }
        #expect(table.count == 1_000 && table.capacity >= 2_000)
        for id in UInt32(1)...1_000 { #expect(table[id] == Self.at(Int(id) * 10)) }
        #expect(!table.contains(0) && !table.contains(1_001) && !table.contains(UInt32.max))
    }

    @Test func removeAllForgetsEveryRequestAndKeepsTheStorage() {
        var table = InFlightRequests()
        for id in UInt32(1)...20 { table.insert(id, arrival: Self.at(1)) }
        let capacity = table.capacity
        table.removeAll()
        #expect(table.isEmpty && table.capacity == capacity)
        for id in UInt32(1)...20 { #expect(!table.contains(id)) }
        table.insert(5, arrival: Self.at(2))
        #expect(table[5] == Self.at(2) && table.count == 1)
    }

    /// Random arrivals and answers (a pipelining client's, with ids from a small range so that probe runs collide
    /// and wrap around the table), checked step by step against a `Dictionary`.
    @Test(arguments: [UInt64(1), 2, 3, 42, 1_000])
    func matchesADictionaryUnderRandomArrivalsAndAnswers(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var table = InFlightRequests()
        var reference: [UInt32: NIODeadline] = [:]
        for step in 0..<20_000 {
            // Ids from 1...200, or any UInt32 now and then; more inserts than removals until the table is large.
            let id: UInt32 =
                random.next() % 10 == 0 ? UInt32(truncatingIfNeeded: random.next()) : UInt32(random.next() % 200 + 1)
            switch random.next() % 5 {
            case 0, 1:
                let arrival = Self.at(step)
                table.insert(id, arrival: arrival)
                reference[id] = arrival
            case 2, 3:
                #expect(table.removeValue(forKey: id) == reference.removeValue(forKey: id), "step \(step), id \(id)")
            default:
                #expect(table.contains(id) == (reference[id] != nil), "step \(step), id \(id)")
            }
            #expect(table.count == reference.count)
            if step % 997 == 0 {
                for (key, value) in reference { #expect(table[key] == value, "step \(step), id \(key)") }
            }
        }
        for (key, value) in reference { #expect(table.removeValue(forKey: key) == value) }
        #expect(table.isEmpty)
    }
}

/// A small deterministic generator (SplitMix64), so that a failing seed fails the same way again.
private struct SplitMix64 {
    private var state: UInt64

    init(seed: UInt64) { self.state = seed }

    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z &>> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z &>> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z &>> 31)
    }
}
