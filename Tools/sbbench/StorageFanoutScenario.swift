import NIOCore
import NIOPosix
import Synchronization
import SwitchboardWire

/// The `storage-fanout` scenario: `--subscribers` connections follow one metadata set (the writer's user metadata
/// with subscribeUserMetadata, or with `--via channel` channel "fanout" with subscribeChannel withMetadata); one
/// writer connection sets item "t" to a ``FanoutPayload`` (event index and send instant); every subscriber notes
/// when the storage event with that item arrived.
extension SBBench {
    static let fanoutWriter = "fanout-writer"
    static let fanoutChannel = "fanout"
    static let fanoutKey = "t"

    func runStorageFanout(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try self.target()
        let clock = ContinuousClock()
        let viaChannel = self.via == "channel"
        let recorder = FanoutRecorder(subscribers: self.subscribers, events: self.events)
        let subscribe: Request = viaChannel
            ? .subscribeChannel(SubscribeChannelRequest(channel: Self.fanoutChannel, withMetadata: true, withPresence: false))
            : .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: Self.fanoutWriter))
        let subject = viaChannel ? Self.fanoutChannel : Self.fanoutWriter

        let subscribeStart = clock.now
        let subscribers = try await self.openInBatches(self.subscribers) { index in
            BenchClient.connect(
                to: target, on: group.next(), user: "fanout-sub-\(index)",
                onPush: { frame, now in
                    Self.storageEventReceived(frame, subject: subject, subscriber: index, at: now, recorder: recorder)
                }
            )
            .flatMap { client in
                client.send(subscribe).flatMapThrowing { response in
                    if let code = response.errorCode { throw BenchFailure("subscribing failed with \(code)") }
                    return client
                }
            }
        }
        report.add("via", self.via)
        report.add("subscribe_seconds", (clock.now - subscribeStart).seconds, decimals: 2)

        let writer = try await BenchClient.connect(to: target, on: group.next(), user: Self.fanoutWriter).get()
        let acks = FanoutAcks()
        await self.driveFanout(recorder: recorder, acks: acks, report: &report) { event in
            writer.send { now in
                recorder.sent(event: event, at: now)
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
        let dropped = subscribers.filter { !$0.channel.isActive }.count
        if dropped > 0 { report.fail("\(dropped) subscriber connections were closed during the run") }
        writer.close()
        for subscriber in subscribers { subscriber.close() }
    }

    /// Notes the arrival of a storage event written by the writer; snapshots and other pushes are ignored.
    static func storageEventReceived(_ frame: Frame, subject: String, subscriber: Int, at now: UInt64, recorder: FanoutRecorder) {
        guard frame.header.op == PushCode.storageEvent.rawValue,
            case .push(.storageEvent(let event))? = try? SwitchboardMessage.decode(frame),
            event.eventType == .set, event.target == subject
        else { return }
        for item in event.items where item.key == Self.fanoutKey {
            if let payload = FanoutPayload(item.value[...]) {
                recorder.delivered(event: payload.event, subscriber: subscriber, at: now, sentAt: payload.sentAt)
            } else {
                recorder.delivered(event: -1, subscriber: subscriber, at: now)
            }
        }
    }
}
