import NIOCore
import SwitchboardDump
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Random and damaged input never crashes the dump, and every byte is accounted for exactly once.
@Suite struct RandomInputTests {
    /// Checks that frames and skipped garbage tile the input: each starts where the previous ended, and together they
    /// cover every byte.
    static func expectTiling(_ events: [DumpEvent], size: Int, _ context: String) {
        var offset = 0
        for event in events {
            if let frame = event.frame {
                #expect(frame.offset == offset, "\(context): frame at \(frame.offset), expected \(offset)")
                offset += frame.wireSize
            } else if let problem = event.problem {
                #expect(problem.offset == offset, "\(context): garbage at \(problem.offset), expected \(offset)")
                offset += problem.skippedBytes ?? 0
                if let resumedAt = problem.resumedAt { #expect(resumedAt == offset, "\(context)") }
            }
        }
        #expect(offset == size, "\(context): events cover \(offset) of \(size) bytes")
    }

    static func dumpInChunks(_ bytes: ByteBuffer, generator: inout SplitMix64) -> [DumpEvent] {
        var dumper = StreamDumper()
        var events: [DumpEvent] = []
        var remaining = bytes
        while remaining.readableBytes > 0 {
            let size = Int.random(in: 1...64, using: &generator)
            events += dumper.append(remaining.readSlice(length: min(size, remaining.readableBytes))!)
        }
        return events + dumper.finish()
    }

    @Test("random bytes never crash the dump, and frames plus garbage cover every byte (seeded)")
    func randomBytes() {
        var generator = SplitMix64(seed: 0x5B_D0_0D)
        let renderers: [any DumpRenderer] = [TextRenderer(), JSONLinesRenderer()]
        for round in 0..<400 {
            let size = Int.random(in: 0...600, using: &generator)
            var bytes = ByteBuffer()
            for _ in 0..<size { bytes.writeInteger(UInt8.random(in: 0...255, using: &generator)) }
            let events = StreamDumper.dump(bytes)
            Self.expectTiling(events, size: size, "round \(round)")
            for event in events {
                for renderer in renderers { _ = renderer.render(event) }
            }
        }
    }

    @Test("damaged copies of a real session never crash the dump, lose no byte, and dump alike in random chunks (seeded)")
    func damagedSessions() {
        var generator = SplitMix64(seed: 0xD4_3A_6E)
        let session = Bytes.fromHex(
            Vector.load("streams.json").first { $0.name == "session.s2c" }?.hex ?? "")
        #expect(session.readableBytes > 100, "streams.json has session.s2c")
        for round in 0..<300 {
            var bytes = Array(session.readableBytesView)
            let damage = Int.random(in: 1...4, using: &generator)
            for _ in 0..<damage {
                switch Int.random(in: 0...2, using: &generator) {
                case 0:  // flip a byte
                    let index = Int.random(in: 0..<bytes.count, using: &generator)
                    bytes[index] ^= UInt8.random(in: 1...255, using: &generator)
                case 1:  // insert random bytes
                    let index = Int.random(in: 0...bytes.count, using: &generator)
                    let count = Int.random(in: 1...8, using: &generator)
                    bytes.insert(contentsOf: (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }, at: index)
                default:  // delete a run
                    let index = Int.random(in: 0..<bytes.count, using: &generator)
                    bytes.removeSubrange(index..<min(bytes.count, index + Int.random(in: 1...8, using: &generator)))
                }
            }
            let input = ByteBuffer(bytes: bytes)
            let events = Self.dumpInChunks(input, generator: &generator)
            Self.expectTiling(events, size: bytes.count, "round \(round)")
            let renderer = JSONLinesRenderer()
            #expect(
                events.map(renderer.render) == StreamDumper.dump(input).map(renderer.render),
                "round \(round): chunked and whole input dump differently")
        }
    }
}
