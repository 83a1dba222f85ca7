import SwitchboardCLI
import SwitchboardClient
import SwitchboardWire
import Testing

@Suite("Results, pushes and errors print as text or canonical JSON")
struct OutputFormattingTests {
    static let metadata = GetUserMetadataResponse(
        majorRevision: 3,
        items: [
            MetadataItem(key: "Name", value: "Tony", revision: 3, updateTs: 1_700_000_000_123, authorUserId: "Tony"),
            MetadataItem(key: "Bio", value: "two words", revision: 2),
        ],
        userId: "Tony")

    @Test("a metadata set prints its revision, then one key=value line per item with its details")
    func metadataSetText() {
        #expect(Rendering.lines(for: .getUserMetadata(Self.metadata), format: .text) == [
            "user Tony majorRevision 3",
            "Name=Tony  revision=3 updated=2023-11-14T22:13:20.123Z author=Tony",
            #"Bio="two words"  revision=2"#,
        ])
    }

    @Test("JSON output is one line in the spec's rendering and reads back to the same response")
    func responseJSONRoundTrips() throws {
        let lines = Rendering.lines(for: .getUserMetadata(Self.metadata), format: .json)
        #expect(lines.count == 1)
        let json = try JSONValue.parse(lines[0])
        #expect(json["kind"] == .string("response"))
        #expect(json["op"] == .string("getUserMetadata"))
        let body = try #require(json["body"])
        #expect(try Response.fromJSON(.getUserMetadata, body: body) == .getUserMetadata(Self.metadata))
    }

    @Test("who-now prints occupancy, users with their state, and the next page bookmark")
    func whoNowText() {
        let response = WhoNowResponse(
            totalOccupancy: 2,
            users: [UserState(userId: "Ann", states: [StateItem(key: "mood", value: "happy")]), UserState(userId: "Bob")],
            nextPage: "abc")
        #expect(Rendering.lines(for: .whoNow(response), format: .text)
            == ["totalOccupancy 2", "Ann  mood=happy", "Bob", "nextPage abc"])
    }

    @Test("answers without a body print ok; counters print their number")
    func shortAnswersText() {
        #expect(Rendering.lines(for: .setLock(EmptyBody()), format: .text) == ["ok"])
        #expect(Rendering.lines(for: .setUserMetadata(SetUserMetadataResponse(majorRevision: 4)), format: .text)
            == ["majorRevision 4"])
        #expect(Rendering.lines(for: .clearProfile(ClearProfileResponse(removed: 2)), format: .text) == ["removed 2"])
        #expect(Rendering.lines(for: .setLock(EmptyBody()), format: .json)
            == [#"{"kind":"response","op":"setLock","body":{}}"#])
    }

    @Test("a set's own deadline prints as expires= on write answers, gets and storage events; none without a TTL")
    func setExpiryText() {
        #expect(ResponseText.lines(for: .setUserMetadata(SetUserMetadataResponse(majorRevision: 2, expiresAtMs: 1_000)))
            == ["majorRevision 2 expires=\(TextQuoting.instant(milliseconds: 1_000))"])
        #expect(ResponseText.lines(for: .getChannelMetadata(GetChannelMetadataResponse(majorRevision: 2))) == ["majorRevision 2"])
        let expired = PushText.line(for: .storageEvent(StorageEvent(eventType: .expired, target: "Tony")))
        #expect(expired == "storageEvent expired user Tony majorRevision=0")
        let set = PushText.line(for: .storageEvent(StorageEvent(eventType: .set, target: "Tony", majorRevision: 1, expiresAtMs: 1_000)))
        #expect(set == "storageEvent set user Tony majorRevision=1 expires=\(TextQuoting.instant(milliseconds: 1_000))")
    }

    @Test("profile reads list records and the ids nobody knew")
    func profileText() {
        let response = GetUserInfoResponse(users: [UserInfo(userId: "Tony", name: "Tony Stark")], missing: ["Nobody"])
        #expect(Rendering.lines(for: .getUserInfo(response), format: .text)
            == [#"Tony  name="Tony Stark""#, "missing Nobody"])
    }

    @Test("every push prints as exactly one line, in text and in JSON")
    func pushesPrintOneLineEach() throws {
        let pushes: [Push] = [
            .storageEvent(StorageEvent(eventType: .set, target: "Tony", majorRevision: 4,
                items: [MetadataItem(key: "k", value: "line one\nline two", revision: 4)], publisher: "Tony")),
            .lockEvent(LockEvent(channel: "lobby", eventType: .acquired, locks: [LockDetail(lockName: "L1", owner: "Ann")])),
            .presenceEvent(PresenceEvent(channel: "lobby", eventType: .snapshot,
                snapshot: [UserState(userId: "Ann", states: [StateItem(key: "mood", value: "ok")])], totalOccupancy: 1)),
            .subscribedEvents(SubscribedEvents(events: [
                SubscribedEvent(eventId: "e1", value: 10_001, publisher: "Ann", ext: "hi"),
                SubscribedEvent(eventId: "e2", value: 1, publisher: "Bob", onlineClientTypes: [.web]),
            ])),
            .profileChanged(ProfileChanged(kind: .user, user: UserInfo(userId: "Tony", name: "T"), id: "Tony")),
            .providerRequest(ProviderRequest(providerRequestId: 5, kind: .groupMember, id: "g1", memberUserId: "Tony")),
            .serverNotice(ServerNotice(code: 8002, message: "bye", atMs: 1_700_000_000_000)),
        ]
        for push in pushes {
            let text = Rendering.line(for: push, format: .text)
            #expect(!text.contains("\n") && text.hasPrefix(push.pushCode.name), "\(text)")
            let json = Rendering.line(for: push, format: .json)
            #expect(!json.contains("\n"))
            #expect(try SwitchboardMessage(json: JSONValue.parse(json)) == .push(push))
        }
        #expect(Rendering.line(for: pushes[0], format: .text)
            == #"storageEvent set user Tony majorRevision=4 publisher=Tony: k="line one\nline two""#)
        #expect(Rendering.line(for: pushes[3], format: .text)
            == "subscribedEvents Ann value=10001 ext=hi eventId=e1 | Bob value=1(login) online=[web] eventId=e2")
    }

    @Test("a resumed storage snapshot prints resumedFrom and the removed keys; a failed resume says resumeFailed")
    func resumedSnapshotText() {
        let resumed = StorageEvent(
            target: "Tony", majorRevision: 8, items: [MetadataItem(key: "Age", value: "46", revision: 8)], resumedFrom: 5,
            removedKeys: ["Nick", "City"])
        #expect(Rendering.line(for: .storageEvent(resumed), format: .text)
            == "storageEvent snapshot user Tony majorRevision=8 resumedFrom=5 removed=Nick,City: Age=46")
        let failed = StorageEvent(target: "Tony", majorRevision: 3, resumeFailed: true)
        #expect(Rendering.line(for: .storageEvent(failed), format: .text)
            == "storageEvent snapshot user Tony majorRevision=3 resumeFailed")
    }

    @Test("an expiring item prints its deadline; an expired event prints the keys that expired")
    func itemTTLText() {
        let read = GetChannelMetadataResponse(majorRevision: 2, items: [
            MetadataItem(key: "typing", value: "yes", revision: 2, expiresAtMs: 1_700_000_000_500),
        ])
        #expect(Rendering.lines(for: .getChannelMetadata(read), format: .text).last
            == "typing=yes  revision=2 expires=2023-11-14T22:13:20.500Z")
        let expired = StorageEvent(
            storageType: .channel, eventType: .expired, target: "room", majorRevision: 3,
            items: [MetadataItem(key: "typing", revision: 2)])
        #expect(Rendering.line(for: .storageEvent(expired), format: .text) == "storageEvent expired channel room majorRevision=3: typing")
    }

    @Test("a will prints its delay and each action as JSON; a rewind one line per broadcast and the latest sequence")
    func willAndBroadcastText() {
        let will = GetWillResponse(
            actions: [WillAction(operation: 34, value: 10_001)], delaySeconds: 30)
        #expect(Rendering.lines(for: .getWill(will), format: .text)
            == ["will of 1 action(s), fires after 30 s", #"  {"operation":34,"value":10001}"#])
        #expect(Rendering.lines(for: .getWill(GetWillResponse()), format: .text) == ["no will"])
        #expect(Rendering.lines(for: .setWill(SetWillResponse(actions: 2)), format: .text) == ["will registered: 2 action(s)"])
        let rewound = RewindBroadcastsResponse(
            broadcasts: [RewoundBroadcast(sequence: 9, sender: "ana", data: "hi there", timestampMs: 1_700_000_000_000)],
            latestSequence: 11)
        #expect(Rendering.lines(for: .rewindBroadcasts(rewound), format: .text)
            == [#"#9 2023-11-14T22:13:20.000Z from ana data="hi there""#, "latestSequence 11"])
        #expect(Rendering.lines(for: .broadcast(BroadcastResponse(sequence: 12, timestampMs: 1, delivered: 3)), format: .text)
            == ["broadcast #12 delivered=3"])
        let push = ChannelBroadcast(channel: "doc", channelType: .stream, sequence: 12, sender: "ana", data: "hi there")
        #expect(Rendering.line(for: .channelBroadcast(push), format: .text)
            == #"channelBroadcast doc(stream) #12 from ana data="hi there""#)
    }

    @Test("a server error prints 'error <code> <name>: <message>' with its CAS details")
    func serverErrorText() {
        let body = ErrorBody(code: 5001, message: "item revision differs", currentRevision: 4, key: "Name")
        let failure = CommandFailure.fromClientError(
            .init(code: .itemRevisionConflict, message: body.message, body: body), op: .setUserMetadata)
        #expect(Rendering.line(for: failure, format: .text)
            == "error 5001 itemRevisionConflict: item revision differs (currentRevision 4) (key Name)")
        #expect(failure.status == .casConflictError)
    }

    @Test("a server error in JSON is the spec's error-response rendering without the request id")
    func serverErrorJSON() throws {
        let body = ErrorBody(code: 5000, message: "majorRevision is 1", currentRevision: 1)
        let failure = CommandFailure.fromClientError(
            .init(code: .revisionConflict, message: body.message, body: body), op: .setUserMetadata)
        let json = try JSONValue.parse(Rendering.line(for: failure, format: .json))
        #expect(json == .object([
            ("kind", .string("response")), ("op", .string("setUserMetadata")),
            ("error", .object([
                ("code", .uint(5000)), ("name", .string("revisionConflict")), ("message", .string("majorRevision is 1")),
                ("currentRevision", .int(1)),
            ])),
        ]))
    }

    @Test("a local failure prints without a code, and as kind error in JSON")
    func localFailureRendering() throws {
        let failure = CommandFailure.unavailable("cannot connect to unix:/x.sock")
        #expect(Rendering.line(for: failure, format: .text) == "error unavailable: cannot connect to unix:/x.sock")
        let json = try JSONValue.parse(Rendering.line(for: failure, format: .json))
        #expect(json["kind"] == .string("error"))
        #expect(json["error"]?["name"] == .string("unavailable"))
    }

    @Test("text values are quoted only when plain text would be ambiguous")
    func quoting() {
        #expect(TextQuoting.quoted("plain") == "plain")
        #expect(TextQuoting.quoted("") == #""""#)
        #expect(TextQuoting.quoted("two words") == #""two words""#)
        #expect(TextQuoting.quoted(#"say "hi""#) == #""say \"hi\"""#)
        #expect(TextQuoting.pair("k", "a=b") == "k=a=b")
    }
}
