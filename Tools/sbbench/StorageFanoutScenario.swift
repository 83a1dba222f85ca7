import NIOCore
import NIOPosix
import Synchronization
import SwitchboardWire

/// The `storage-fanout` scenario: `--subscribers` connections follow one metadata set (the writer's user metadata
/// with subscribeUserMetadata, or with `--via channel` channel "fanout" with subscribeChannel withMetadata); one
/// writer connection sets item "t" to a ``FanoutPayload`` (event index and send instant); every subscriber notes
/// when the storage event with that item arrived. The subscribers are ``RawSubscriber`` sockets read by one
/// ``FanoutReader`` thread; the writer is a ``BenchClient``, on the same gateway or (`--writer-tcp`) on another node of
/// a cluster. With `--transport websocket` the subscribers connect to the gateway's WebSocket listener instead
/// (`--websocket`), and with `--transport both` the run measures the fan-out over TCP, then over WebSocket.
extension SBBench {
    static let fanoutWriter = "fanout-writer"
    static let fanoutChannel = "fanout"
    static let fanoutKey = "t"

    func runStorageFanout(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        guard self.transport == "both" else {
            let upgrade = self.transport == "websocket" ? try self.webSocketUpgrade() : nil
            try await self.runStorageFanoutPass(group: group, webSocket: upgrade, report: &report)
            return
        }
        // The same fan-out over TCP, then over WebSocket, on the same gateway: the two p99s side by side.
        var passes: [(name: String, report: BenchReport)] = []
        for (name, upgrade) in [("tcp", nil), ("websocket", try self.webSocketUpgrade())] as [(String, WebSocketUpgrade?)] {
            var pass = BenchReport()
            try await self.runStorageFanoutPass(group: group, webSocket: upgrade, report: &pass)
            for field in pass.fields { report.add("\(name)_\(field.key)", field.value) }
            for failure in pass.failures { report.fail("\(name): \(failure)") }
            passes.append((name, pass))
        }
        let p99 = passes.map { pass in Double(pass.report.fields.first { $0.key == "delivery_p99_us" }?.value ?? "") ?? 0 }
        if p99[0] > 0 { report.add("websocket_to_tcp_p99", p99[1] / p99[0], decimals: 2) }
    }

    /// The `Host` and path the fan-out's WebSocket subscribers upgrade with (`--websocket`, `--websocket-path`).
    func webSocketUpgrade() throws -> WebSocketUpgrade {
        WebSocketUpgrade(host: try BenchTarget.tcp(self.webSocket).description, path: self.webSocketPath)
    }

    /// One storage fan-out: subscribers on TCP (`webSocket` nil) or upgraded to WebSocket on the `--websocket`
    /// address, the writer on TCP.
    private func runStorageFanoutPass(
        group: MultiThreadedEventLoopGroup, webSocket: WebSocketUpgrade?, report: inout BenchReport
    ) async throws {
        let target = webSocket == nil ? try self.target() : try BenchTarget.tcp(self.webSocket)
        let clock = ContinuousClock()
        let viaChannel = self.via == "channel"
        let progress = FanoutProgress(subscribers: self.subscribers, events: self.events)
        let subscribe: Request = viaChannel
            ? .subscribeChannel(SubscribeChannelRequest(channel: Self.fanoutChannel, withMetadata: true, withPresence: false))
            : .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: Self.fanoutWriter))
        let subject = viaChannel ? Self.fanoutChannel : Self.fanoutWriter

        let subscribeStart = clock.now
        let subscribers = try await RawSubscriber.openSwitchboard(
            self.subscribers, target: target, webSocket: webSocket, user: { "fanout-sub-\($0)" }, requests: [subscribe]
        ) { response in
            if let code = response.errorCode { throw BenchFailure("subscribing failed with \(code)") }
        }
        defer { RawSubscriber.close(subscribers) }
        report.add("via", self.via)
        report.add("subscribe_seconds", (clock.now - subscribeStart).seconds, decimals: 2)

        let scanner = SwitchboardFanoutScanner(
            StorageFanoutAttribution(subject: subject, recorder: FanoutRecorder(progress: progress)))
        let keepAlive = FanoutKeepAlive.switchboardPing(subscribers, webSocket: webSocket != nil)
        let measured: (summary: FanoutSummary, closed: Int, drive: FanoutDrive, acks: FanoutAcks)
        if webSocket != nil {
            let reader = try FanoutReader(
                subscribers: subscribers, scanner: WebSocketFanoutScanner(inner: scanner), keepAlive: keepAlive)
            reader.start()
            defer { _ = reader.stop() }
            let (drive, acks) = try await self.driveStorageWrites(group: group, progress: progress, viaChannel: viaChannel)
            let stopped = reader.stop()
            measured = (stopped.scanner.inner.attribution.recorder.summary, stopped.closedConnections, drive, acks)
        } else {
            let reader = try FanoutReader(subscribers: subscribers, scanner: scanner, keepAlive: keepAlive)
            reader.start()
            defer { _ = reader.stop() }
            let (drive, acks) = try await self.driveStorageWrites(group: group, progress: progress, viaChannel: viaChannel)
            let stopped = reader.stop()
            measured = (stopped.scanner.attribution.recorder.summary, stopped.closedConnections, drive, acks)
        }
        self.reportFanout(measured.drive, summary: measured.summary, acks: measured.acks, into: &report)
        if measured.closed > 0 {
            report.fail("\(measured.closed) subscriber connections were closed during the run")
        }
    }

    /// The writer's side of a storage fan-out: `--events` writes of item "t", each noted in `progress` as it is sent.
    private func driveStorageWrites(
        group: MultiThreadedEventLoopGroup, progress: FanoutProgress, viaChannel: Bool
    ) async throws -> (FanoutDrive, FanoutAcks) {
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
            .whenComplete { acks.note($0) }
        }
        return (drive, acks)
    }
}
