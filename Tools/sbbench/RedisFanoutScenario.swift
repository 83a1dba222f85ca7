import Foundation
import NIOCore
import NIOPosix
import SwitchboardRedis
import Synchronization

/// The `redis-fanout` scenario, the yardstick for storage-fanout: `--subscribers` connections SUBSCRIBE one channel
/// of the Redis server at `--redis`; one publisher connection PUBLISHes ``FanoutPayload`` messages, paced or one at a
/// time exactly as storage-fanout's writer; the same report. The channel name is new in every run, so PUBLISH must
/// answer exactly `--subscribers` receivers. The subscribers are read exactly as storage-fanout's: ``RawSubscriber``
/// sockets and one ``FanoutReader`` thread.
extension SBBench {
    func runRedisFanout(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try BenchTarget.tcp(self.redis)
        let clock = ContinuousClock()
        let channel = "sbbench-fanout-\(getpid())-\(UInt64(Date().timeIntervalSince1970 * 1000))"
        let progress = FanoutProgress(subscribers: self.subscribers, events: self.events)

        let subscribeStart = clock.now
        let subscribers = try await RawSubscriber.openRedis(self.subscribers, target: target, channel: channel)
        defer { RawSubscriber.close(subscribers) }
        report.add("redis", self.redis)
        report.add("subscribe_seconds", (clock.now - subscribeStart).seconds, decimals: 2)

        let reader = try FanoutReader(
            subscribers: subscribers, scanner: RedisFanoutScanner(recorder: FanoutRecorder(progress: progress)), keepAlive: nil)
        reader.start()
        defer { _ = reader.stop() }
        guard case .tcp(let host, let port) = target else { preconditionFailure("--redis is host:port") }
        let publisher = try await RedisConnection.connect(
            host: host, port: port, eventLoopGroup: group.next(), commandTimeout: nil)
        defer { Task { await publisher.close() } }
        let acks = FanoutAcks()
        let expected = self.subscribers
        let drive = await self.driveFanout(progress: progress, acks: acks) { event in
            publisher.send(madeAtWrite: {
                let now = NIODeadline.now().uptimeNanoseconds
                progress.sent(event: event, at: now)
                return ["PUBLISH", .string(channel), .string(FanoutPayload(event: event, sentAt: now).text)]
            })
            .whenComplete { result in
                guard case .success(let reply) = result, case .number(let receivers) = reply.value else {
                    acks.failed.wrappingAdd(1, ordering: .relaxed)
                    return
                }
                acks.acknowledged.wrappingAdd(1, ordering: .relaxed)
                if receivers < expected { acks.shortFanouts.wrappingAdd(1, ordering: .relaxed) }
            }
        }
        let stopped = reader.stop()
        self.reportFanout(drive, summary: stopped.scanner.recorder.summary, acks: acks, into: &report)
        if stopped.closedConnections > 0 {
            report.fail("\(stopped.closedConnections) subscriber connections were closed during the run")
        }
    }
}
