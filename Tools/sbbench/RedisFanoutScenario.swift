import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// The `redis-fanout` scenario, the yardstick for storage-fanout: `--subscribers` connections SUBSCRIBE one channel
/// of the Redis server at `--redis`; one publisher connection PUBLISHes ``FanoutPayload`` messages, paced or one at a
/// time exactly as storage-fanout's writer; the same report. The channel name is new in every run, so PUBLISH must
/// answer exactly `--subscribers` receivers.
extension SBBench {
    func runRedisFanout(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try BenchTarget.tcp(self.redis)
        let clock = ContinuousClock()
        let channel = "sbbench-fanout-\(getpid())-\(UInt64(Date().timeIntervalSince1970 * 1000))"
        let recorder = FanoutRecorder(subscribers: self.subscribers, events: self.events)

        let subscribeStart = clock.now
        let subscribers = try await self.openInBatches(self.subscribers) { index in
            RedisClient.connect(to: target, on: group.next()) { payload, now in
                Self.redisMessageReceived(payload, subscriber: index, at: now, recorder: recorder)
            }
            .flatMap { client in
                client.send(["SUBSCRIBE", channel]).flatMapThrowing { reply in
                    guard case .array(let elements?) = reply, elements.first?.string == "subscribe" else {
                        throw BenchFailure("SUBSCRIBE was answered with \(reply)")
                    }
                    return client
                }
            }
        }
        report.add("redis", self.redis)
        report.add("subscribe_seconds", (clock.now - subscribeStart).seconds, decimals: 2)

        let publisher = try await RedisClient.connect(to: target, on: group.next()).get()
        let acks = FanoutAcks()
        let expected = self.subscribers
        await self.driveFanout(recorder: recorder, acks: acks, report: &report) { event in
            publisher.send { now in
                recorder.sent(event: event, at: now)
                return ["PUBLISH", channel, FanoutPayload(event: event, sentAt: now).text]
            }
            .whenComplete { result in
                guard case .success(.integer(let receivers)) = result else {
                    acks.failed.wrappingAdd(1, ordering: .relaxed)
                    return
                }
                acks.acknowledged.wrappingAdd(1, ordering: .relaxed)
                if receivers < expected { acks.shortFanouts.wrappingAdd(1, ordering: .relaxed) }
            }
        }
        let dropped = subscribers.filter { !$0.channel.isActive }.count
        if dropped > 0 { report.fail("\(dropped) subscriber connections were closed during the run") }
        publisher.close()
        for subscriber in subscribers { subscriber.close() }
    }

    /// Notes the arrival of one published message.
    static func redisMessageReceived(_ payload: ByteBuffer, subscriber: Int, at now: UInt64, recorder: FanoutRecorder) {
        if let parsed = FanoutPayload(utf8: payload.readableBytesView) {
            recorder.delivered(event: parsed.event, subscriber: subscriber, at: now, sentAt: parsed.sentAt)
        } else {
            recorder.delivered(event: -1, subscriber: subscriber, at: now)
        }
    }
}
