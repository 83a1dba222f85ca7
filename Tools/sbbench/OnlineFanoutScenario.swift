import Foundation
import NIOCore
import NIOPosix
import Synchronization
import SwitchboardWire

/// The `online-fanout` scenario: `--subscribers` users subscribe (subscribeEvent, type 1) to the online state of one
/// publisher; the publisher then logs in and out `--rounds` times. Login latency runs from the publisher's HELLO
/// being written to each subscriber's receipt of the value-1 event, logout latency from the logout request to the
/// value-2 event. A round starts when the previous one reached every subscriber (or timed out). The subscribers are
/// ``RawSubscriber`` sockets read by one ``FanoutReader`` thread; the publisher is a ``BenchClient``.
///
/// The publisher id is new in every run, so online state and subscriptions left in the database by earlier runs
/// cannot send stray events; the subscriptions are removed again at the end.
extension SBBench {
    func runOnlineFanout(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try self.target()
        let clock = ContinuousClock()
        let publisher = "online-pub-\(getpid())-\(UInt64(Date().timeIntervalSince1970 * 1000))"
        let login = FanoutProgress(subscribers: self.subscribers, events: self.rounds)
        let logout = FanoutProgress(subscribers: self.subscribers, events: self.rounds)
        let rounds = OnlineRounds()

        let subscribeStart = clock.now
        let subscribe = Request.subscribeEvent(SubscribeEventRequest(eventType: 1, expirySeconds: 3_600, publishers: [publisher]))
        let subscribers = try await RawSubscriber.openSwitchboard(
            self.subscribers, target: target, user: { "online-sub-\($0)" }, requests: [subscribe]
        ) { response in
            guard case .subscribeEvent(let answer)? = response.response, answer.failedPublishers.isEmpty else {
                throw BenchFailure("subscribeEvent failed: \(response.errorCode.map { "\($0)" } ?? "publisher refused")")
            }
        }
        defer { RawSubscriber.close(subscribers) }
        report.add("subscribers", self.subscribers)
        report.add("subscribe_seconds", (clock.now - subscribeStart).seconds, decimals: 2)

        let attribution = OnlineFanoutAttribution(
            publisher: publisher, rounds: rounds, login: FanoutRecorder(progress: login), logout: FanoutRecorder(progress: logout))
        let reader = try FanoutReader(
            subscribers: subscribers, scanner: SwitchboardFanoutScanner(attribution), keepAlive: .switchboardPing(subscribers))
        reader.start()
        defer { _ = reader.stop() }

        let runStart = clock.now
        var completedRounds = 0
        for round in 0..<self.rounds {
            if (clock.now - runStart).seconds >= self.duration { break }
            rounds.login.store(round, ordering: .sequentiallyConsistent)
            let session = try await BenchClient.connect(
                to: target, on: group.next(), user: publisher, onHelloSent: { login.sent(event: round, at: $0) }
            ).get()
            let loggedIn = await login.waitForDeliveries(of: round..<round + 1, timeout: self.eventTimeout)
            rounds.logout.store(round, ordering: .sequentiallyConsistent)
            let answer = try? await session.send { now in
                logout.sent(event: round, at: now)
                return .logout(EmptyBody())
            }.get()
            let loggedOut = await logout.waitForDeliveries(of: round..<round + 1, timeout: self.eventTimeout)
            try? await session.channel.closeFuture.get()
            completedRounds += 1
            if answer == nil || answer?.errorCode != nil { report.fail("the publisher's logout in round \(round) failed") }
            if !loggedIn || !loggedOut || answer?.errorCode != nil { break }
        }
        let seconds = (clock.now - runStart).seconds
        let stopped = reader.stop()
        report.add("rounds", completedRounds)
        report.add("seconds", seconds, decimals: 2)
        stopped.scanner.attribution.login.summary.add(to: &report, prefix: "login", seconds: seconds)
        stopped.scanner.attribution.logout.summary.add(to: &report, prefix: "logout", seconds: seconds)
        if stopped.closedConnections > 0 {
            report.fail("\(stopped.closedConnections) subscriber connections were closed during the run")
        }

        let unsubscribe = Request.unsubscribeEvent(UnsubscribeEventRequest(eventType: 1, publishers: [publisher]))
        _ = await RawSubscriber.exchange(unsubscribe, on: subscribers, stopped: stopped.leftovers, isOpen: stopped.isOpen)
    }
}

/// The round in progress of an online-fanout run, for attributing events to it (-1: none yet).
final class OnlineRounds: Sendable {
    let login = Atomic<Int>(-1)
    let logout = Atomic<Int>(-1)
}
