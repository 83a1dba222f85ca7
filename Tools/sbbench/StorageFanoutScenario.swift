import NIOCore
import NIOPosix
import Synchronization
import SwitchboardWire

/// The `storage-fanout` scenario: `--subscribers` connections follow one metadata set (the writer's user metadata
/// with subscribeUserMetadata, or with `--via channel` channel "fanout" with subscribeChannel withMetadata); one
/// writer connection sets item "t" to a ``FanoutPayload`` (event index and send instant); every subscriber notes
/// when the storage event with that item arrived. The subscribers are ``RawSubscriber`` sockets read by one
/// ``FanoutReader`` thread; the writer is a ``BenchClient``, on the same gateway or (`--writer-tcp`) on another node of
/// a cluster.
extension SBBench {
    static let fanoutWriter = "fanout-writer"
    static let fanoutChannel = "fanout"
    static let fanoutKey = "t"

    func runStorageFanout(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try self.target()
        let clock = ContinuousClock()
        let viaChannel = self.via == "channel"
        let progress = FanoutProgress(subscribers: self.subscribers, events: self.events)
        let subscribe: Request = viaChannel
            ? .subscribeChannel(SubscribeChannelRequest(channel: Self.fanoutChannel, withMetadata: true, withPresence: false))
            : .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: Self.fanoutWriter))
        let subject = viaChannel ? Self.fanoutChannel : Self.fanoutWriter

        let subscribeStart = clock.now
        let subscribers = try await RawSubscriber.openSwitchboard(
            self.subscribers, target: target, user: { "fanout-sub-\($0)" }, requests: [subscribe]
        ) { response in
            if let code = response.errorCode { throw BenchFailure("subscribing failed with \(code)") }
        }
        defer { RawSubscriber.close(subscribers) }
        report.add("via", self.via)
        report.add("subscribe_seconds", (clock.now - subscribeStart).seconds, decimals: 2)

        let reader = try FanoutReader(
            subscribers: subscribers,
            scanner: SwitchboardFanoutScanner(StorageFanoutAttribution(subject: subject, recorder: FanoutRecorder(progress: progress))),
            keepAlive: .switchboardPing(subscribers))
        reader.start()
        defer { _ = reader.stop() }
        let writer = try await BenchClient.connect(to: try self.writerTarget(), on: group.next(), user: Self.fanoutWriter).get()
        defer { writer.close() }
        let acks = FanoutAcks()
        let drive = await self.driveFanout(progress: progress, acks: acks) { event in
            writer.send { now in
                progress.sent(event: event, at: now)
                let item = MetadataItem(key: Self.fanoutKey, value: FanoutPayload(event: event, sentAt: now).text)
                return viaChannel
                    ? .setChannelMetadata(SetChannelMetadataRequest(channel: Self.fanoutChannel, items: [item]))
                    : .setUserMetadata(SetUserMetadataRequest(items: [item]))
            }
            .whenComplete { result in
                if case .success(let response) = result, response.errorCode == nil {
                    acks.acknowledged.wrappingAdd(1, ordering: .relaxed)
                } else {
                    acks.failed.wrappingAdd(1, ordering: .relaxed)
                }
            }
        }
        let stopped = reader.stop()
        self.reportFanout(drive, summary: stopped.scanner.attribution.recorder.summary, acks: acks, into: &report)
        if stopped.closedConnections > 0 {
            report.fail("\(stopped.closedConnections) subscriber connections were closed during the run")
        }
    }
}
