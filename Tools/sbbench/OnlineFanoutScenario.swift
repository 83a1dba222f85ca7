import Foundation
import NIOCore
import NIOPosix
import Synchronization
import SwitchboardWire

/// The `online-fanout` scenario: `--subscribers` users subscribe (subscribeEvent, type 1) to the online state of one
/// publisher; the publisher then logs in and out `--rounds` times. Login latency runs from the publisher's HELLO
/// being written to each subscriber's receipt of the value-1 event, logout latency from the logout request to the
/// value-2 event. A round starts when the previous one reached every subscriber (or timed out).
///
/// The publisher id is new in every run, so online state and subscriptions left in the database by earlier runs
/// cannot send stray events; the subscriptions are removed again at the end.
extension SBBench {
    func runOnlineFanout(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try self.target()
        let clock = ContinuousClock()
        let publisher = "online-pub-\(getpid())-\(UInt64(Date().timeIntervalSince1970 * 1000))"
        let login = FanoutRecorder(subscribers: self.subscribers, events: self.rounds)
        let logout = FanoutRecorder(subscribers: self.subscribers, events: self.rounds)
        let rounds = OnlineRounds()

        let subscribeStart = clock.now
        let subscribe = Request.subscribeEvent(SubscribeEventRequest(eventType: 1, expirySeconds: 3_600, publishers: [publisher]))
        let subscribers = try await self.openInBatches(self.subscribers) { index in
            BenchClient.connect(
                to: target, on: group.next(), user: "online-sub-\(index)",
                onPush: { frame, now in
                    Self.onlineEventsReceived(
                        frame, publisher: publisher, subscriber: index, at: now, rounds: rounds, login: login, logout: logout)
                }
            )
            .flatMap { client in
                client.send(subscribe).flatMapThrowing { response in
                    guard case .subscribeEvent(let answer)? = response.response, answer.failedPublishers.isEmpty else {
                        throw BenchFailure("subscribeEvent failed: \(response.errorCode.map { "\($0)" } ?? "publisher refused")")
                    }
                    return client
                }
            }
        }
        report.add("subscribers", self.subscribers)
        report.add("subscribe_seconds", (clock.now - subscribeStart).seconds, decimals: 2)

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
        report.add("rounds", completedRounds)
        report.add("seconds", seconds, decimals: 2)
        login.summary.add(to: &report, prefix: "login", seconds: seconds)
        logout.summary.add(to: &report, prefix: "logout", seconds: seconds)
        let dropped = subscribers.filter { !$0.channel.isActive }.count
        if dropped > 0 { report.fail("\(dropped) subscriber connections were closed during the run") }

        let unsubscribe = Request.unsubscribeEvent(UnsubscribeEventRequest(eventType: 1, publishers: [publisher]))
        let unsubscribed = subscribers.map { $0.send(unsubscribe) }
        for answer in unsubscribed { _ = try? await answer.get() }
        for subscriber in subscribers { subscriber.close() }
    }

    /// Attributes the publisher's online-state events to the round in progress: value 1 to the login round, value 2
    /// to the logout round; anything else from the publisher (value 3: an abnormal end) counts as unexpected.
    static func onlineEventsReceived(
        _ frame: Frame, publisher: String, subscriber: Int, at now: UInt64, rounds: OnlineRounds,
        login: FanoutRecorder, logout: FanoutRecorder
    ) {
        guard frame.header.op == PushCode.subscribedEvents.rawValue,
            case .push(.subscribedEvents(let batch))? = try? SwitchboardMessage.decode(frame)
        else { return }
        for event in batch.events where event.publisher == publisher && event.eventType == 1 {
            switch event.value {
            case 1: login.delivered(event: rounds.login.load(ordering: .sequentiallyConsistent), subscriber: subscriber, at: now)
            case 2: logout.delivered(event: rounds.logout.load(ordering: .sequentiallyConsistent), subscriber: subscriber, at: now)
            default: login.delivered(event: -1, subscriber: subscriber, at: now)
            }
        }
    }
}

/// The round in progress of an online-fanout run, for attributing events to it (-1: none yet).
final class OnlineRounds: Sendable {
    let login = Atomic<Int>(-1)
    let logout = Atomic<Int>(-1)
}
