import NIOCore
import SwitchboardDump
import SwitchboardWire
import Testing

@Suite struct PairingTests {
    static func request(_ id: UInt32, _ channel: String) -> SwitchboardMessage {
        .request(id: id, .getLocks(GetLocksRequest(channel: channel)))
    }

    static func response(_ id: UInt32) -> SwitchboardMessage {
        .response(id: id, .getLocks(GetLocksResponse()))
    }

    @Test("responses pair with their requests by id, in any order; errors pair too; the rest is flagged")
    func responsesPairByRequestID() throws {
        let stream = Bytes.encode([
            Self.request(1, "a"),  // #1
            Self.request(2, "b"),  // #2
            Self.request(3, "c"),  // #3
            Self.response(2),  // #4 answers #2
            .error(id: 1, op: Opcode.getLocks.rawValue, ErrorBody(.notFound, "no such channel")),  // #5 answers #1
            Self.response(9),  // #6 no request 9
            Self.request(3, "again"),  // #7 id 3 still in flight
            .push(.serverNotice(ServerNotice(code: 1, message: "hi"))),  // #8
        ])
        let events = StreamDumper.dump(stream)
        let frames = events.compactMap(\.frame)
        #expect(frames.count == 8)

        func answered(_ frame: DumpedFrame) -> Int? {
            if case .answers(let request, let latency) = frame.pairing, latency == nil { return request.index }
            return nil
        }
        #expect(answered(frames[3]) == 2)
        #expect(answered(frames[4]) == 1)
        #expect(frames[5].pairing == .unmatched)
        guard case .duplicateRequestID(let earlier) = frames[6].pairing else {
            Issue.record("the reused id was not flagged: \(String(describing: frames[6].pairing))")
            return
        }
        #expect(earlier.index == 3 && earlier.offset == frames[2].offset)
        #expect(frames[0].pairing == nil && frames[7].pairing == nil)

        // Request 3 never got its response.
        guard case .unanswered(let request)? = events.last?.kind else {
            Issue.record("no unanswered request reported")
            return
        }
        #expect(request.index == 3 && request.requestID == 3 && request.op == Opcode.getLocks.rawValue)

        let text = events.map { TextRenderer().render($0) }
        #expect(text[3].contains("response getLocks id=2") && text[3].contains("answers #2 body="), "\(text[3])")
        #expect(text[4].contains("flags=0x02(ERROR) answers #1 error={\"code\":4000"), "\(text[4])")
        #expect(text[5].contains("answers no request in flight"), "\(text[5])")
        #expect(text[6].contains("reuses the id of #3, still in flight"), "\(text[6])")
        #expect(text.last == "#3 request getLocks id=3 @\(frames[2].offset) was never answered")
    }

    @Test("a response under another op than its request says so")
    func opMismatchIsShown() throws {
        let stream = Bytes.encode([
            Self.request(5, "a"), .response(id: 5, .whereNow(WhereNowResponse())),
        ])
        let events = StreamDumper.dump(stream)
        let line = TextRenderer().render(try #require(events.dropFirst().first))
        #expect(line.contains("answers #1 (a getLocks request: op differs)"), "\(line)")
    }

    @Test("latency is the time between the request and the response frames")
    func latencyFromFrameTimes() throws {
        var pairing = RequestPairing()
        let request = Bytes.encode([Self.request(7, "a")])
        let response = Bytes.encode([Self.response(7)])
        var requestFrame = try #require(StreamDumper.dump(request).first?.frame)
        var responseFrame = try #require(StreamDumper.dump(response).first?.frame)
        let start = NIODeadline.uptimeNanoseconds(1_000_000)
        pairing.observe(&requestFrame, at: start)
        pairing.observe(&responseFrame, at: start + .microseconds(1_234))
        guard case .answers(_, let latency) = responseFrame.pairing else {
            Issue.record("not paired")
            return
        }
        #expect(latency == .microseconds(1_234))
        let event = DumpEvent(
            .frame(responseFrame), time: WallClockTime(seconds: 1_767_225_600, nanoseconds: 5_000), connection: 2,
            direction: .serverToClient)
        #expect(TextRenderer().render(event).hasPrefix("00:00:00.000005 c2 s2c @0 #1 response getLocks id=7 len=3 flags=0x00 answers #1 after 1.234 ms"))
        let json = try JSONValue.parse(JSONLinesRenderer().render(event))
        #expect(json["answers"]?["latencyMs"] == .number("1.234"))
        #expect(json["time"] == .string("2026-01-01T00:00:00.000005Z"))
        #expect(json["connection"] == .number("2") && json["direction"] == .string("s2c"))
    }
}
