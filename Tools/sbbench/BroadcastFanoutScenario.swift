import NIOCore
import NIOPosix
import Synchronization
import SwitchboardWire

/// The `broadcast-fanout` scenario: the delivery of a channel broadcast to `--subscribers` members against a storage
/// event's, in one run on one gateway (issue 31: a broadcast within 1.1x a storage event's p99). First the
/// storage-fanout pass with `--via channel` (members of channel "fanout" with metadata, a writer setting an item of its
/// metadata); then as many members of the same channel get `--events` broadcasts whose data is a ``FanoutPayload``.
/// Both passes report under their prefix (`storage_`, `broadcast_`), and `broadcast_to_storage_p99` is the ratio.
/// The gateway limits each session to 50 broadcasts a second (bursts of 100): pace the writer with `--rate` under it
/// for more than 100 events.
extension SBBench {
    func runBroadcastFanout(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        var storage = BenchReport()
        var viaChannel = self
        viaChannel.via = "channel"
        try await viaChannel.runStorageFanout(group: group, report: &storage)
        var broadcast = BenchReport()
        try await self.runBroadcastFanoutPass(group: group, report: &broadcast)
        for (name, pass) in [("storage", storage), ("broadcast", broadcast)] {
            for field in pass.fields { report.add("\(name)_\(field.key)", field.value) }
            for failure in pass.failures { report.fail("\(name): \(failure)") }
        }
        func p99(_ pass: BenchReport) -> Double { Double(pass.fields.first { $0.key == "delivery_p99_us" }?.value ?? "") ?? 0 }
        if p99(storage) > 0 { report.add("broadcast_to_storage_p99", p99(broadcast) / p99(storage), decimals: 2) }
    }

    private func runBroadcastFanoutPass(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try self.target()
        let clock = ContinuousClock()
        let progress = FanoutProgress(subscribers: self.subscribers, events: self.events)
        let subscribe = Request.subscribeChannel(SubscribeChannelRequest(channel: Self.fanoutChannel, withPresence: false))
        let subscribeStart = clock.now
        let subscribers = try await RawSubscriber.openSwitchboard(
            self.subscribers, target: target, webSocket: nil, user: { "broadcast-sub-\($0)" }, requests: [subscribe]
        ) { response in
            if let code = response.errorCode { throw BenchFailure("subscribing failed with \(code)") }
        }
        defer { RawSubscriber.close(subscribers) }
        report.add("subscribe_seconds", (clock.now - subscribeStart).seconds, decimals: 2)

        let scanner = SwitchboardFanoutScanner(
            BroadcastFanoutAttribution(channel: Self.fanoutChannel, recorder: FanoutRecorder(progress: progress)))
        let reader = try FanoutReader(
            subscribers: subscribers, scanner: scanner, keepAlive: .switchboardPing(subscribers, webSocket: false))
        reader.start()
        defer { _ = reader.stop() }
        let writer = try await BenchClient.connect(to: try self.writerTarget(), on: group.next(), user: Self.fanoutWriter).get()
        defer { writer.close() }
        let acks = FanoutAcks()
        let drive = await self.driveFanout(progress: progress, acks: acks) { event in
            writer.send { now in
                progress.sent(event: event, at: now)
                return .broadcast(
                    BroadcastRequest(
                        channel: Self.fanoutChannel, data: FanoutPayload(event: event, sentAt: now).text, noRewind: true))
            }
            .whenComplete { acks.note($0) }
        }
        let stopped = reader.stop()
        self.reportFanout(drive, summary: stopped.scanner.attribution.recorder.summary, acks: acks, into: &report)
        if stopped.closedConnections > 0 {
            report.fail("\(stopped.closedConnections) subscriber connections were closed during the run")
        }
    }
}

/// Finds the ``FanoutPayload`` in each `channelBroadcast` push of the channel.
struct BroadcastFanoutAttribution: SwitchboardPushAttribution {
    static let pushCode = PushCode.channelBroadcast
    let channel: [UInt8]
    var recorder: FanoutRecorder

    init(channel: String, recorder: FanoutRecorder) {
        self.channel = Array(channel.utf8)
        self.recorder = recorder
    }

    mutating func attribute(_ bytes: UnsafeRawBufferPointer, body: Range<Int>, subscriber: Int, at now: UInt64) throws(MalformedBody) {
        // ChannelBroadcast: 1 channel, 2 channelType, 3 sequence, 4 sender, 5 data, 6 timestampMs.
        var fields = BodyFields(bytes, body)
        var channel = body.lowerBound..<body.lowerBound
        var data = channel
        while let field = try fields.nextField() {
            switch field.number {
            case 1: channel = try fields.lengthDelimited(field.kind)
            case 2, 3, 6: _ = try fields.varint(field.kind)
            case 4: _ = try fields.lengthDelimited(field.kind)
            case 5: data = try fields.lengthDelimited(field.kind)
            default: try fields.skip(field.kind)
            }
        }
        guard fields.equals(channel, self.channel) else { return }
        if let payload = FanoutPayload(utf8: UnsafeRawBufferPointer(rebasing: bytes[data])) {
            self.recorder.delivered(event: payload.event, subscriber: subscriber, at: now, sentAt: payload.sentAt)
        } else {
            self.recorder.unexpectedReceived()
        }
    }

    mutating func unexpectedReceived() { self.recorder.unexpectedReceived() }
}
