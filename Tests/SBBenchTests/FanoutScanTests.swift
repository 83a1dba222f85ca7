import Histogram
import NIOCore
import SwitchboardRedis
import SwitchboardWire
import Synchronization
import Testing

@testable import sbbench

/// The fan-out reader's parsing: Switchboard frames and Redis pushes split off the received bytes in place, and each
/// delivery attributed to its event, whatever the split of the stream into reads.
@Suite struct FanoutScanTests {
    // MARK: Helpers

    static func frame(_ message: SwitchboardMessage) -> [UInt8] {
        var buffer = ByteBuffer()
        FrameEncoder().encode(message, into: &buffer)
        return Array(buffer.readableBytesView)
    }

    static func storageSet(_ target: String, _ items: [MetadataItem], eventType: StorageEventType = .set) -> [UInt8] {
        Self.frame(.push(.storageEvent(StorageEvent(eventType: eventType, target: target, majorRevision: 7, items: items, publisher: target))))
    }

    static func delivery(event: Int, sentAt: UInt64, target: String = "writer") -> [UInt8] {
        Self.storageSet(target, [MetadataItem(key: "t", value: FanoutPayload(event: event, sentAt: sentAt).text, revision: 3)])
    }

    /// A frame with a raw header and body.
    static func raw(_ header: FrameHeader, _ body: [UInt8]) -> [UInt8] {
        var buffer = ByteBuffer()
        FrameEncoder.encodeRaw(header: header, body: ByteBuffer(bytes: body), into: &buffer)
        return Array(buffer.readableBytesView)
    }

    static func storageStreams(subscribers: Int = 1, events: Int = 4) -> (FanoutStreams<SwitchboardFanoutScanner<StorageFanoutAttribution>>, FanoutProgress) {
        let progress = FanoutProgress(subscribers: subscribers, events: events)
        for event in 0..<events { progress.sent(event: event, at: 0) }
        let scanner = SwitchboardFanoutScanner(StorageFanoutAttribution(subject: "writer", recorder: FanoutRecorder(progress: progress)))
        return (FanoutStreams(scanner: scanner, subscribers: subscribers), progress)
    }

    /// Feeds `reads` to subscriber 0 one after the other; false when a read broke the stream.
    static func feed<Scanner>(_ streams: inout FanoutStreams<Scanner>, _ reads: [ArraySlice<UInt8>], subscriber: Int = 0, at now: UInt64 = 1_000) -> Bool {
        for read in reads {
            let intact = read.withUnsafeBytes { streams.received($0, subscriber: subscriber, at: now) }
            if !intact { return false }
        }
        return true
    }

    /// A stream of a delivery, pushes and frames that are none, and another delivery.
    static let mixedStream: [UInt8] =
        Self.storageSet("writer", [MetadataItem(key: "t", value: "snapshot")], eventType: .snapshot)  // snapshot: not a delivery
        + Self.delivery(event: 0, sentAt: 400)
        + Self.frame(.response(id: 1, .logout(EmptyBody())))
        + Self.frame(.error(id: 2, op: Opcode.subscribeUserMetadata.rawValue, ErrorBody(code: 7000, message: "no")))
        + Self.frame(.control(.pong(Pong(nonce: 9))))
        + Self.frame(.push(.presenceEvent(PresenceEvent(channel: "c", joined: ["a"]))))
        + Self.delivery(event: 1, sentAt: 500, target: "someone-else")  // another subject: passed over
        + Self.storageSet("writer", [MetadataItem(key: "other", value: "x")])  // another key: passed over
        + Self.delivery(event: 1, sentAt: 600)

    static func expectTwoDeliveries(_ streams: FanoutStreams<SwitchboardFanoutScanner<StorageFanoutAttribution>>, _ progress: FanoutProgress, _ comment: Comment? = nil) {
        let summary = streams.scanner.attribution.recorder.summary
        #expect(progress.deliveries(of: 0) == 1 && progress.deliveries(of: 1) == 1 && summary.deliveries == 2, comment)
        #expect(summary.unexpected == 0 && summary.duplicates == 0, comment)
        #expect(summary.latencies.min == 400 && summary.latencies.maxRecorded == 600, comment)
        #expect(streams.partial[0].isEmpty, comment)
    }

    // MARK: Switchboard frames

    @Test("several frames in one read: the deliveries are found, the other frames passed over")
    func severalFramesInOneRead() {
        var (streams, progress) = Self.storageStreams()
        #expect(Self.feed(&streams, [Self.mixedStream[...]]))
        Self.expectTwoDeliveries(streams, progress)
        #expect(streams.replies.isEmpty)
    }

    @Test("a stream split into two reads at every byte offset, or read a byte at a time, gives the same deliveries")
    func everySplit() {
        let stream = Self.mixedStream
        for cut in 1..<stream.count {
            var (streams, progress) = Self.storageStreams()
            #expect(Self.feed(&streams, [stream[..<cut], stream[cut...]]))
            Self.expectTwoDeliveries(streams, progress, "cut at \(cut)")
        }
        var (streams, progress) = Self.storageStreams()
        #expect(Self.feed(&streams, stream.indices.map { stream[$0...$0] }))
        Self.expectTwoDeliveries(streams, progress)
    }

    @Test("a partial frame waits per subscriber: interleaved reads of two subscribers do not mix")
    func partialFramesPerSubscriber() {
        var (streams, progress) = Self.storageStreams(subscribers: 2)
        let first = Self.delivery(event: 2, sentAt: 1)
        let second = Self.delivery(event: 2, sentAt: 2)
        #expect(Self.feed(&streams, [first[..<5]], subscriber: 0))
        #expect(Self.feed(&streams, [second[..<9]], subscriber: 1))
        #expect(streams.partial[0].count == 5 && streams.partial[1].count == 9)
        #expect(Self.feed(&streams, [first[5...]], subscriber: 0))
        #expect(Self.feed(&streams, [second[9...]], subscriber: 1))
        #expect(progress.deliveries(of: 2) == 2)
        #expect(streams.partial[0].isEmpty && streams.partial[1].isEmpty)
    }

    @Test("the same delivery twice counts as a duplicate")
    func duplicate() {
        var (streams, _) = Self.storageStreams()
        let bytes = Self.delivery(event: 0, sentAt: 1)
        #expect(Self.feed(&streams, [(bytes + bytes)[...]]))
        let summary = streams.scanner.attribution.recorder.summary
        #expect(summary.deliveries == 1 && summary.duplicates == 1)
    }

    @Test("frames that cannot be parsed count as unexpected, and the frames after them are still read")
    func malformedFrames() {
        // field 6 (items) claims 127 bytes, 1 follows
        let badLength = StorageEvent(eventType: .set, target: "writer").encodedBody + [0x32, 0x7F, 0x0A]
        let malformed: [[UInt8]] = [
            Self.raw(FrameHeader(kind: .push, op: PushCode.storageEvent.rawValue), badLength),
            Self.raw(FrameHeader(kind: .push, op: PushCode.storageEvent.rawValue), [0x10, 0x80]),  // varint cut short
            Self.raw(FrameHeader(kind: .push, op: PushCode.storageEvent.rawValue), [0x13]),  // wire type 3
            Self.raw(FrameHeader(kind: .push, op: PushCode.storageEvent.rawValue), [0x1A, 0x01]),  // target: a length of 1, no byte
            Self.raw(FrameHeader(kind: .push, op: PushCode.storageEvent.rawValue), [0x12, 0x00]),  // eventType (a varint field) as a LEN
            Self.raw(FrameHeader(kind: .push, op: PushCode.storageEvent.rawValue), [0x10, 0x82, 0x00]),  // overlong varint
            Self.raw(FrameHeader(kind: .push, op: PushCode.storageEvent.rawValue, flags: .compressed), [0x01]),  // not negotiated
            Self.raw(FrameHeader(kind: .push, op: PushCode.storageEvent.rawValue, flags: .error), []),  // ERROR on a push
            [0x02, 0x04, PushCode.storageEvent.rawValue | 0xC0],  // a reserved flag bit
            Self.raw(FrameHeader(kind: .request, op: 1, requestID: 1), []),  // a request from the server
            Self.raw(FrameHeader(kind: .response, op: 1, requestID: 0), []),  // request id 0
            Self.frame(.control(.welcome(Welcome(userId: "again")))),  // a second WELCOME
            [0x02, 0x00, 0x3F],  // an unknown control op
            Self.storageSet("writer", [MetadataItem(key: "t", value: "not a payload")]),  // the item is no payload
        ]
        for bytes in malformed {
            var (streams, progress) = Self.storageStreams()
            #expect(Self.feed(&streams, [(bytes + Self.delivery(event: 3, sentAt: 1))[...]]), "\(bytes)")
            #expect(streams.scanner.attribution.recorder.summary.unexpected == 1, "\(bytes)")
            #expect(progress.deliveries(of: 3) == 1, "\(bytes)")
        }
    }

    @Test("a length field that cannot be valid ends the stream, counted as unexpected")
    func brokenLength() {
        for bytes: [UInt8] in [[0x80, 0x80, 0x80, 0x80, 0x01], [0x81, 0x00], [0x01, 0x00], [0x00], [0xFF, 0xFF, 0x7F]] {
            var (streams, _) = Self.storageStreams()
            #expect(!Self.feed(&streams, [(Self.delivery(event: 0, sentAt: 1) + bytes)[...]]), "\(bytes)")
            let summary = streams.scanner.attribution.recorder.summary
            #expect(summary.deliveries == 1 && summary.unexpected == 1, "\(bytes)")
        }
    }

    @Test("the splitter agrees with FrameDecoder on header and body of every kind of frame")
    func splitterMatchesDecoder() throws {
        let messages: [SwitchboardMessage] = [
            .control(.ping(Ping(nonce: 300))), .control(.goAway(GoAway(code: 8002, message: "bye"))),
            .response(id: 4_000_000_000, .logout(EmptyBody())), .error(id: 1, op: 3, ErrorBody(code: 1, message: "x")),
            .push(.subscribedEvents(SubscribedEvents(events: [SubscribedEvent(eventId: "e", value: 1, publisher: "p")]))),
            .push(.storageEvent(StorageEvent(target: String(repeating: "a", count: 300)))),
        ]
        for message in messages {
            let bytes = Self.frame(message)
            var buffer = ByteBuffer(bytes: bytes)
            var decoder = FrameDecoder(direction: .serverToClient)
            let decoded = try #require(try decoder.decodeFrame(from: &buffer))
            bytes.withUnsafeBytes { raw in
                guard case .frame(let view, let end) = SwitchboardFrameSplit.next(in: raw, from: 0) else {
                    Issue.record("\(message) was not split")
                    return
                }
                #expect(end == bytes.count)
                #expect(view.kind == decoded.header.kind && view.op == decoded.header.op)
                #expect(Array(raw[view.body]) == Array(decoded.body.readableBytesView))
            }
        }
    }

    @Test("a PING is answered with a PONG of the same nonce, at any split")
    func pingIsAnswered() {
        let ping = Self.frame(.control(.ping(Ping(nonce: 123_456))))
        let pong = Self.frame(.control(.pong(Pong(nonce: 123_456))))
        for cut in 1..<ping.count {
            var (streams, _) = Self.storageStreams()
            #expect(Self.feed(&streams, [ping[..<cut]]))
            #expect(streams.replies.isEmpty)
            #expect(Self.feed(&streams, [ping[cut...]]))
            #expect(streams.replies == pong)
        }
    }

    // MARK: online-fanout

    static func onlineEvent(_ publisher: String, value: UInt64, eventType: UInt64 = 1) -> SubscribedEvent {
        SubscribedEvent(eventId: "id-\(value)", eventType: eventType, value: value, publisher: publisher, timestampMs: 5, onlineClientTypes: [.ios])
    }

    @Test("online events are attributed to the round in progress; other publishers and types are passed over, odd values unexpected")
    func onlineAttribution() {
        let login = FanoutProgress(subscribers: 2, events: 2)
        let logout = FanoutProgress(subscribers: 2, events: 2)
        for round in 0..<2 {
            login.sent(event: round, at: 10)
            logout.sent(event: round, at: 20)
        }
        let rounds = OnlineRounds()
        rounds.login.store(1, ordering: .sequentiallyConsistent)
        rounds.logout.store(0, ordering: .sequentiallyConsistent)
        let attribution = OnlineFanoutAttribution(
            publisher: "pub", rounds: rounds, login: FanoutRecorder(progress: login), logout: FanoutRecorder(progress: logout))
        var streams = FanoutStreams(scanner: SwitchboardFanoutScanner(attribution), subscribers: 2)
        let batch = Self.frame(
            .push(.subscribedEvents(SubscribedEvents(events: [
                Self.onlineEvent("pub", value: 1), Self.onlineEvent("other", value: 2), Self.onlineEvent("pub", value: 2, eventType: 5),
                Self.onlineEvent("pub", value: 2),
            ]))))
        let abnormal = Self.frame(.push(.subscribedEvents(SubscribedEvents(events: [Self.onlineEvent("pub", value: 3)]))))
        let stream = batch + Self.frame(.push(.storageEvent(StorageEvent(target: "pub")))) + abnormal
        for cut in 1..<stream.count {
            var copy = streams
            #expect(Self.feed(&copy, [stream[..<cut], stream[cut...]], subscriber: 1, at: 110))
            let logins = copy.scanner.attribution.login.summary
            let logouts = copy.scanner.attribution.logout.summary
            #expect(logins.deliveries == 1 && logins.unexpected == 1 && logins.latencies.maxRecorded == 100, "cut at \(cut)")
            #expect(logouts.deliveries == 1 && logouts.unexpected == 0 && logouts.latencies.maxRecorded == 90, "cut at \(cut)")
        }
        #expect(Self.feed(&streams, [stream[...]], subscriber: 0))
        #expect(login.deliveries(of: 1) == 1 && logout.deliveries(of: 0) == 1 && login.deliveries(of: 0) == 0)
    }

    // MARK: Redis

    static func resp(_ values: [String]) -> [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeRESPCommand(values)
        return Array(buffer.readableBytesView)
    }

    static func redisStreams(events: Int = 3) -> (FanoutStreams<RedisFanoutScanner>, FanoutProgress) {
        let progress = FanoutProgress(subscribers: 1, events: events)
        for event in 0..<events { progress.sent(event: event, at: 0) }
        return (FanoutStreams(scanner: RedisFanoutScanner(recorder: FanoutRecorder(progress: progress)), subscribers: 1), progress)
    }

    static let redisStream: [UInt8] =
        Self.resp(["subscribe", "ch"]) + Array(":1\r\n".utf8)  // (a confirmation, as arrays of bulk strings and an integer)
        + Self.resp(["message", "ch", FanoutPayload(event: 0, sentAt: 700).text])
        + Array("+PONG\r\n$-1\r\n*-1\r\n*2\r\n*1\r\n:5\r\n$0\r\n\r\n".utf8)  // values that are no message
        + Array("*3\r\n+subscribe\r\n$2\r\nch\r\n$6\r\n1 1500\r\n".utf8)  // three elements, but no message
        + Self.resp(["pmessage", "c*", "ch", "0 1"])
        + Array("*3\r\n+message\r\n$2\r\nch\r\n$6\r\n1 1012\r\n".utf8)  // "message" as a simple string
        + Array("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$-1\r\n".utf8)  // a null payload: not a message
        + Self.resp(["message", "ch", FanoutPayload(event: 2, sentAt: 1_000).text])

    @Test("Redis message pushes split at every byte offset give the same deliveries; other values are passed over")
    func redisEverySplit() {
        let stream = Self.redisStream
        for cut in 0...stream.count {
            var (streams, progress) = Self.redisStreams()
            #expect(Self.feed(&streams, [stream[..<cut], stream[cut...]], at: 2_000), "cut at \(cut)")
            let summary = streams.scanner.recorder.summary
            #expect((0..<3).allSatisfy { progress.deliveries(of: $0) == 1 }, "cut at \(cut)")
            #expect(summary.unexpected == 0 && summary.latencies.min == 988 && summary.latencies.maxRecorded == 1_300, "cut at \(cut)")
            #expect(streams.partial[0].isEmpty)
        }
    }

    @Test("a Redis message that carries no payload is unexpected; bytes that are not RESP end the stream")
    func redisMalformed() {
        var (streams, _) = Self.redisStreams()
        #expect(Self.feed(&streams, [Self.resp(["message", "ch", "hello"])[...]]))
        #expect(streams.scanner.recorder.summary.unexpected == 1)
        for garbage in ["?x\r\n", ":12a\r\n", "$2\r\nabXY", "+OK\rX", "*1\r\n$-2\r\n", "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nabcd\r\n"] {
            var (streams, _) = Self.redisStreams()
            #expect(!Self.feed(&streams, [Array(garbage.utf8)[...]]), "\(garbage.debugDescription)")
            #expect(streams.scanner.recorder.summary.unexpected == 1, "\(garbage.debugDescription)")
        }
        let deep = String(repeating: "*1\r\n", count: RESPLimits.default.maximumDepth + 2) + ":1\r\n"
        var (deepStreams, _) = Self.redisStreams()
        #expect(!Self.feed(&deepStreams, [Array(deep.utf8)[...]]))
    }
}
