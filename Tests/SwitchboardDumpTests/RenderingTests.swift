import NIOCore
import SwitchboardDump
import SwitchboardWire
import Testing

@Suite struct RenderingTests {
    /// SPEC.md §14.3 and §14.4: a setUserMetadata request and its response, then garbage, then a PING.
    static let stream: ByteBuffer = {
        var bytes = Bytes.fromHex("17004c010a04546f6e79120c0a044e616d651204546f6e79" + "05008c010801")
        bytes.writeBytes([0x03, 0x80, 0x03, 0x00])
        bytes.writeImmutableBuffer(Bytes.fromHex("040003082a"))
        return bytes
    }()

    @Test("a set TTL shows: setTtlMs in the request, the set's expiresAtMs in the answer and in an expired event")
    func setTtlFieldsShow() throws {
        let stream = Bytes.encode([
            .request(id: 7, .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "a", value: "1")], setTtlMs: -1))),
            .response(id: 7, .setUserMetadata(SetUserMetadataResponse(majorRevision: 3, expiresAtMs: 1_767_225_600_000))),
            .push(.storageEvent(StorageEvent(eventType: .expired, target: "Tony"))),
        ])
        let events = StreamDumper.dump(stream)
        let text = events.map { TextRenderer().render($0) }
        #expect(text.count == 3)
        #expect(text[0].contains(#""setTtlMs":-1"#), "\(text[0])")
        #expect(text[1].contains(#""expiresAtMs":1767225600000"#), "\(text[1])")
        #expect(text[2].contains(#""eventType":"expired""#), "\(text[2])")
        let json = try JSONValue.parse(JSONLinesRenderer().render(events[1]))
        #expect(json["message"]?["body"]?["expiresAtMs"]?.uint64Value == 1_767_225_600_000)
    }

    @Test("every JSON line parses, names its event, and a frame's message is the spec's rendering")
    func jsonLinesParse() throws {
        let events = StreamDumper.dump(Self.stream)
        let lines = events.map(JSONLinesRenderer().render)
        #expect(lines.count == 4)
        let parsed = try lines.map { try JSONValue.parse($0) }
        #expect(parsed.map { $0["event"]?.stringValue } == ["frame", "frame", "garbage", "frame"])
        #expect(lines.allSatisfy { !$0.contains("\n") })

        let request = parsed[0]
        #expect(request["offset"] == .number("0") && request["frame"] == .number("1"))
        #expect(request["size"] == .number("24") && request["length"] == .number("23"))
        #expect(request["class"] == .string("request") && request["opName"] == .string("setUserMetadata"))
        #expect(request["op"] == .number("12") && request["requestId"] == .number("1"))
        #expect(
            request["message"]
                == (try JSONValue.parse(
                    #"{"kind":"request","op":"setUserMetadata","requestId":1,"body":{"userId":"Tony","items":[{"key":"Name","value":"Tony"}]}}"#)))

        let response = parsed[1]
        #expect(response["answers"]?["frame"] == .number("1") && response["answers"]?["offset"] == .number("0"))
        #expect(response["answers"]?["latencyMs"] == nil, "no latency without timestamps")
        #expect(
            response["message"]
                == (try JSONValue.parse(
                    #"{"kind":"response","op":"setUserMetadata","requestId":1,"body":{"majorRevision":1}}"#)))

        let garbage = parsed[2]
        #expect(garbage["offset"] == .number("30") && garbage["skippedBytes"] == .number("4"))
        #expect(garbage["resumedAt"] == .number("34"))
        #expect(garbage["error"]?["code"] == .number("1004") && garbage["error"]?["name"] == .string("badHeader"))

        #expect(parsed[3]["message"] == (try JSONValue.parse(#"{"kind":"control","op":"ping","body":{"nonce":42}}"#)))
    }

    @Test("text output shows offset, number, class, op, request id, length, flags, pairing and body on one line")
    func textLines() {
        let lines = StreamDumper.dump(Self.stream).map { TextRenderer().render($0) }
        #expect(
            lines == [
                #"@0 #1 request setUserMetadata id=1 len=23 flags=0x00 body={"userId":"Tony","items":[{"key":"Name","value":"Tony"}]}"#,
                #"@24 #2 response setUserMetadata id=1 len=5 flags=0x00 answers #1 body={"majorRevision":1}"#,
                "@30 garbage badHeader(1004): reserved flag bits 0x80 are set; skipped 4 bytes, resynchronised at @34",
                #"@34 #3 control ping len=4 flags=0x00 body={"nonce":42}"#,
            ])
    }

    @Test("long bodies are cut in text output at the body limit, and never in JSON lines")
    func longBodiesAreCut() throws {
        let value = String(repeating: "x", count: 3000)
        let bytes = Bytes.encode([.request(id: 1, .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: value)])))])
        let event = try #require(StreamDumper.dump(bytes).first)
        let cut = TextRenderer(bodyLimit: 100).render(event)
        #expect(cut.hasSuffix("...(3034 chars)"), "\(cut.suffix(40))")
        #expect(TextRenderer(bodyLimit: 0).render(event).contains(value))
        #expect(JSONLinesRenderer().render(event).contains(value))
    }

    @Test("proxy events render as text and as JSON lines")
    func proxyEvents() throws {
        let time = WallClockTime(seconds: 1_767_225_600 + 3_723, nanoseconds: 123_456_789)
        let summary = ConnectionSummary(
            closedBy: .upstream, durationNanoseconds: 1_500_000_000, clientToServerBytes: 120,
            serverToClientBytes: 340, clientToServerFrames: 3, serverToClientFrames: 5)
        let problem = StreamProblem(
            offset: 42, error: SwitchboardWireError(.badVarint, "length field is longer than 4 bytes or not minimal"),
            skippedBytes: nil, resumedAt: nil)
        let events = [
            DumpEvent(.connectionOpened(client: "127.0.0.1:5000", upstream: "unix:/tmp/sb.sock"), time: time, connection: 4),
            DumpEvent(.decodingStopped(problem), time: time, connection: 4, direction: .clientToServer),
            DumpEvent(.connectionClosed(summary), time: time, connection: 4),
        ]
        let text = events.map { TextRenderer().render($0) }
        #expect(
            text == [
                "01:02:03.123456 c4 open: client 127.0.0.1:5000 -> upstream unix:/tmp/sb.sock",
                "01:02:03.123456 c4 c2s @42 decoding stopped: badVarint(1005): length field is longer than 4 bytes or not"
                    + " minimal; this direction is still forwarded unchanged but no longer decoded",
                "01:02:03.123456 c4 closed by upstream after 1.500 s: c2s 120 bytes/3 frames, s2c 340 bytes/5 frames",
            ])
        let json = try events.map { try JSONValue.parse(JSONLinesRenderer().render($0)) }
        #expect(json[0]["event"] == .string("open") && json[0]["time"] == .string("2026-01-01T01:02:03.123456Z"))
        #expect(json[1]["event"] == .string("decodingStopped") && json[1]["direction"] == .string("c2s"))
        #expect(json[1]["error"]?["code"] == .number("1005") && json[1]["skippedBytes"] == nil)
        #expect(json[2]["closedBy"] == .string("upstream") && json[2]["durationMs"] == .number("1500.000"))
        #expect(json[2]["s2c"]?["frames"] == .number("5"))
    }
}
