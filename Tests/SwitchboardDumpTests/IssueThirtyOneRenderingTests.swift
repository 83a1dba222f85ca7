import NIOCore
import SwitchboardDump
import SwitchboardWire
import Testing

/// sbdump shows the frames of resume, item TTLs, last wills and channel broadcasts (issue 31) readably: each line
/// names the op and carries the fields that matter (`sinceRevision`, `ttlMs`/`expiresAtMs`, the `expired` event
/// kind, a will's actions and delay, a broadcast's data and sequence), in text and in JSON lines.
@Suite struct IssueThirtyOneRenderingTests {
    static let messages: [SwitchboardMessage] = [
        .request(id: 1, .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony", sinceRevision: 7))),
        .request(id: 2, .resumeEvents(ResumeEventsRequest(epoch: 1_765_100_000_000_000, after: 41))),
        .response(id: 2, .resumeEvents(ResumeEventsResponse(epoch: 1_765_100_000_000_000, position: 44, gap: true, replayed: 3))),
        .request(id: 3, .setChannelMetadata(SetChannelMetadataRequest(
            channel: "room", items: [MetadataItem(key: "typing", value: "yes", ttlMs: 1_500)]))),
        .push(.storageEvent(StorageEvent(
            storageType: .channel, eventType: .expired, target: "room", majorRevision: 2,
            items: [MetadataItem(key: "typing", revision: 1, expiresAtMs: 1_765_100_000_123)]))),
        .request(id: 4, .setWill(SetWillRequest(
            actions: [WillAction(operation: UInt64(Opcode.setUserMetadata.rawValue), items: [MetadataItem(key: "status", value: "away")])],
            delaySeconds: 30))),
        .request(id: 5, .broadcast(BroadcastRequest(channel: "doc", data: #"{"cursor":[1,2]}"#, noRewind: true))),
        .push(.channelBroadcast(ChannelBroadcast(
            channel: "doc", sequence: 1_765_100_000_000_009, sender: "ana", data: #"{"cursor":[1,2]}"#, timestampMs: 1_765_100_000_000))),
        .response(id: 6, .rewindBroadcasts(RewindBroadcastsResponse(
            broadcasts: [RewoundBroadcast(sequence: 9, sender: "ana", data: "hi", timestampMs: 5)], latestSequence: 9))),
    ]

    @Test("each frame's text line names its op and shows the new fields; its JSON line carries the spec rendering")
    func framesRenderReadably() throws {
        let events = StreamDumper.dump(Bytes.encode(Self.messages))
        #expect(events.allSatisfy { $0.problem == nil })
        let frames = events.compactMap(\.frame)
        try #require(frames.count == Self.messages.count)
        let text = events.map { TextRenderer().render($0) }
        let expected: [(String, [String])] = [
            ("request subscribeUserMetadata id=1", [#""sinceRevision":7"#]),
            ("request resumeEvents id=2", [#""epoch":1765100000000000"#, #""after":41"#]),
            ("response resumeEvents id=2", [#""position":44"#, #""gap":true"#, #""replayed":3"#]),
            ("request setChannelMetadata id=3", [#""key":"typing""#, #""ttlMs":1500"#]),
            ("push storageEvent", [#""eventType":"expired""#, #""expiresAtMs":1765100000123"#]),
            ("request setWill id=4", [#""operation":12"#, #""delaySeconds":30"#, #""value":"away""#]),
            ("request broadcast id=5", [#""data":"{\"cursor\":[1,2]}""#, #""noRewind":true"#]),
            ("push channelBroadcast", [#""sequence":1765100000000009"#, #""sender":"ana""#]),
            ("response rewindBroadcasts id=6", [#""latestSequence":9"#, #""broadcasts":[{"sequence":9"#]),
        ]
        for (line, (head, fragments)) in zip(text, expected) {
            #expect(line.contains(head), "\(line)")
            for fragment in fragments { #expect(line.contains(fragment), "\(fragment) not in \(line)") }
        }
        for (event, message) in zip(events, Self.messages) {
            let json = try JSONValue.parse(JSONLinesRenderer().render(event))
            #expect(json["message"] == message.jsonValue, "\(json)")
        }
    }
}
