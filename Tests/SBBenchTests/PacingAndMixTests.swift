import SwitchboardWire
import Testing

@testable import sbbench

/// The open-loop schedule of paced requests and the set/get choice of the mix scenario.
@Suite struct PacingAndMixTests {
    @Test("a pacer releases one send per interval, each with its own due time, and none early")
    func pacerReleasesOnSchedule() {
        var pacer = Pacer(start: 1_000, ratePerSecond: 1_000)  // one per millisecond
        #expect(pacer.interval == 1_000_000)
        #expect(pacer.takeDue(now: 999) == nil)
        #expect(pacer.takeDue(now: 1_000) == 1_000)
        #expect(pacer.takeDue(now: 1_000) == nil)
        // Late by three and a half intervals: the three missed sends are due at once, with their original times.
        let now: UInt64 = 1_000 + 3_500_000
        #expect(pacer.takeDue(now: now) == 1_001_000)
        #expect(pacer.takeDue(now: now) == 2_001_000)
        #expect(pacer.takeDue(now: now) == 3_001_000)
        #expect(pacer.takeDue(now: now) == nil)
        #expect(pacer.nextDue == 4_001_000)
    }

    @Test("phases spread connections of the same rate over one interval")
    func phaseShiftsStart() {
        let pacers = (0..<4).map { Pacer(start: 0, ratePerSecond: 100, phase: Double($0) / 4) }
        #expect(pacers.map(\.nextDue) == [0, 2_500_000, 5_000_000, 7_500_000])
    }

    @Test("the mix sends sets in the configured share, spread over the stream", arguments: [0.0, 0.2, 0.5, 1.0])
    func mixHonoursRatio(ratio: Double) {
        let mix = MetadataMix(setRatio: ratio)
        let sets = (1...10_000).filter { mix.isSet(UInt64($0)) }.count
        #expect(abs(Double(sets) / 10_000 - ratio) < 0.01)
        // Any window of 200 requests is within five percent of the ratio: no long runs of one kind.
        for start in stride(from: 1, to: 10_000, by: 200) {
            let window = (start..<start + 200).filter { mix.isSet(UInt64($0)) }.count
            #expect(abs(Double(window) / 200 - ratio) <= 0.05, "window at \(start)")
        }
    }

    @Test("mix requests are setUserMetadata or getUserMetadata of the caller")
    func mixRequestKinds() {
        let mix = MetadataMix(setRatio: 0.5)
        for sequence in UInt64(1)...50 {
            switch mix.request(sequence) {
            case .setUserMetadata(let set): #expect(mix.isSet(sequence) && set.userId.isEmpty && set.items.count == 1)
            case .getUserMetadata(let get): #expect(!mix.isSet(sequence) && get.userId.isEmpty)
            default: Issue.record("unexpected request for \(sequence)")
            }
        }
    }
}
