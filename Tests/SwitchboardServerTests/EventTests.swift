import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// A clock the test moves by hand.
final class ManualClock: Sendable {
    private let value = Atomic<Int64>(1_700_000_000_000)
    var now: Int64 { self.value.load(ordering: .relaxed) }
    func advance(seconds: Int64) { self.value.add(seconds * 1000, ordering: .relaxed) }
    var function: @Sendable () -> Int64 { { self.now } }
}

/// A gateway with only the event area, on `path` (a fresh in-memory database when nil).
func withEventGateway<T: Sendable>(
    path: String? = nil, clock: ManualClock = ManualClock(), grace: TimeAmount = .milliseconds(200),
    observers: [any SessionObserver] = [],
    _ body: @Sendable (RunningGateway, ManualClock) async throws -> T
) async throws -> T {
    try await withGateway(
        application: { application in
            application.areas = [.events]
            application.eventGracePeriod = grace
            application.inMemory = path == nil
            application.eventDatabase = path
        }, observers: observers, nowMillis: clock.function
    ) { gateway in
        try await body(gateway, clock)
    }
}

/// The events of the next `subscribedEvents` push on a connection.
func nextEvents(_ connection: SwitchboardConnection, seconds: Double = 2) async throws -> [SubscribedEvent] {
    try await withThrowingTaskGroup(of: [SubscribedEvent]?.self) { group in
        group.addTask {
            for await push in connection.pushes {
                if case .subscribedEvents(let events) = push { return events.events }
            }
            return nil
        }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        let first = try await group.next() ?? nil
        group.cancelAll()
        guard let events = first else { throw SwitchboardClientError(code: .providerTimeout, message: "no subscribedEvents") }
        return events
    }
}

private func subscribe(
    _ connection: SwitchboardConnection, _ publishers: [String], expiry: UInt64 = 3600, sync: Bool = false
) async throws -> SubscribeEventResponse {
    guard case .subscribeEvent(let response) = try await connection.send(
        .subscribeEvent(SubscribeEventRequest(expirySeconds: expiry, syncEnabled: sync, publishers: publishers)))
    else { throw SwitchboardClientError(code: .internal, message: "unexpected response") }
    return response
}

@discardableResult
private func publish(
    _ connection: SwitchboardConnection, value: UInt64, expiry: UInt64 = 604_800, onlineOnly: Bool = true,
    multiDeviceSync: Bool = true, ext: String = ""
) async throws -> PublishEventResponse {
    guard case .publishEvent(let response) = try await connection.send(
        .publishEvent(
            PublishEventRequest(
                value: value, expirySeconds: expiry, onlineOnly: onlineOnly, multiDeviceSync: multiDeviceSync, ext: ext)))
    else { throw SwitchboardClientError(code: .internal, message: "unexpected response") }
    return response
}

private func query(_ connection: SwitchboardConnection, _ publishers: [String]) async throws -> [EventSubscription] {
    guard case .queryEventSubscriptions(let response) = try await connection.send(
        .queryEventSubscriptions(QueryEventSubscriptionsRequest(publishers: publishers)))
    else { throw SwitchboardClientError(code: .internal, message: "unexpected response") }
    return response.subscriptions
}

private func expectError(_ code: ErrorCode, _ body: () async throws -> Void) async {
    do {
        try await body()
        Issue.record("expected error \(code)")
    } catch let error as SwitchboardClientError {
        #expect(error.code == code)
    } catch {
        Issue.record("unexpected error \(error)")
    }
}

@Suite struct EventTests {
    @Test func rangeChecksAndQuota() async throws {
        try await withEventGateway { gateway, _ in
            let a = try await gateway.connect(.tcp, user: "A")
            await expectError(.unsupportedEventType) {
                _ = try await a.send(.subscribeEvent(SubscribeEventRequest(eventType: 2, expirySeconds: 60, publishers: ["B"])))
            }
            await expectError(.invalidExpiry) { _ = try await subscribe(a, ["B"], expiry: 59) }
            await expectError(.invalidExpiry) { _ = try await subscribe(a, ["B"], expiry: 2_592_001) }
            await expectError(.tooManyPublishers) { _ = try await subscribe(a, (0...100).map { "p\($0)" }) }
            await expectError(.invalidArgument) { _ = try await subscribe(a, []) }
            await expectError(.reservedEventValue) { try await publish(a, value: 9999) }
            await expectError(.reservedEventValue) { try await publish(a, value: 1) }
            await expectError(.invalidExpiry) { try await publish(a, value: 10_000, expiry: 59) }
            await expectError(.invalidExpiry) { try await publish(a, value: 10_000, expiry: 604_801) }
            await expectError(.valueTooLong) { try await publish(a, value: 10_000, ext: String(repeating: "x", count: 4097)) }
            await expectError(.unsupportedEventType) {
                _ = try await a.send(.publishEvent(PublishEventRequest(eventType: 3, value: 10_000)))
            }
            await expectError(.tooManyPublishers) { _ = try await query(a, (0...100).map { "p\($0)" }) }
            await expectError(.tooManyPublishers) {
                _ = try await a.send(.unsubscribeEvent(UnsubscribeEventRequest(publishers: (0...100).map { "p\($0)" })))
            }
            // Bounds themselves are accepted; invalid ids come back as failed.
            #expect(try await subscribe(a, ["B", "", String(repeating: "x", count: 65)], expiry: 2_592_000).failedPublishers.count == 2)
            #expect(try await publish(a, value: 10_000, expiry: 60, ext: String(repeating: "x", count: 4096)).eventId.isEmpty == false)
            // Quota: 3,000 publishers per user; B and 2,998 others first.
            for batch in 0..<30 {
                let publishers = (0..<100).map { "q\(batch * 100 + $0)" }.filter { $0 != "q2998" && $0 != "q2999" }
                _ = try await subscribe(a, publishers)
            }
            await expectError(.subscriptionQuotaExceeded) { _ = try await subscribe(a, ["q2999", "new"]) }
            _ = try await subscribe(a, ["q2999"])  // exactly 3,000
            await expectError(.subscriptionQuotaExceeded) { _ = try await subscribe(a, ["one-more"]) }
            _ = try await subscribe(a, ["B", "q0"])  // renewing needs no quota
            #expect(try await query(a, ["one-more", "q2999"]).map(\.publisher) == ["q2999"])
            await a.close()
        }
    }

    @Test(arguments: Transport.allCases)
    func publishQueryUnsubscribe(transport: Transport) async throws {
        try await withEventGateway { gateway, clock in
            let a1 = try await gateway.connect(transport, user: "A")
            let a2 = try await gateway.connect(transport, user: "A")
            let b = try await gateway.connect(transport, user: "B")
            let c = try await gateway.connect(transport, user: "C")
            _ = try await subscribe(a1, ["B", "C"], expiry: 3600)
            let published = try await publish(b, value: 10_001, ext: "hello")
            for a in [a1, a2] {
                let events = try await nextEvents(a)
                #expect(events.count == 1)
                #expect(events.first?.publisher == "B" && events.first?.value == 10_001 && events.first?.ext == "hello")
                #expect(events.first?.eventId == published.eventId && events.first?.timestampMs == UInt64(clock.now))
                #expect(events.first?.expiresAtMs == UInt64(clock.now) + 604_800_000)
            }
            clock.advance(seconds: 10)
            let subscriptions = try await query(a2, ["B", "C", "D"])
            #expect(subscriptions.map(\.publisher) == ["B", "C"])
            #expect(subscriptions.allSatisfy { $0.remainingSeconds == 3590 && $0.expiresAtMs == $0.subscribedAtMs + 3_600_000 })
            // Unsubscribe some: B's next event does not arrive, C's does.
            _ = try await a1.send(.unsubscribeEvent(UnsubscribeEventRequest(publishers: ["B"])))
            try await publish(b, value: 10_002)
            try await publish(c, value: 10_003)
            #expect(try await nextEvents(a1).map(\.value) == [10_003])
            // Unsubscribe all.
            _ = try await a2.send(.unsubscribeEvent(UnsubscribeEventRequest()))
            #expect(try await query(a1, ["B", "C"]).isEmpty)
            await a1.close()
            await a2.close()
            await b.close()
            await c.close()
        }
    }

    @Test func subscriptionAndEventExpiry() async throws {
        try await withEventGateway { gateway, clock in
            let a = try await gateway.connect(.tcp, user: "A")
            let b = try await gateway.connect(.tcp, user: "B")
            let c = try await gateway.connect(.tcp, user: "C")
            _ = try await subscribe(a, ["B"], expiry: 60)
            _ = try await subscribe(a, ["C"], expiry: 600)
            try await publish(b, value: 10_001)
            #expect(try await nextEvents(a).map(\.value) == [10_001])
            clock.advance(seconds: 30)
            _ = try await subscribe(a, ["B"], expiry: 60)  // renewing resets the expiry
            clock.advance(seconds: 45)
            #expect(try await query(a, ["B"]).first?.remainingSeconds == 15)
            clock.advance(seconds: 15)
            #expect(try await query(a, ["B", "C"]).map(\.publisher) == ["C"])
            try await publish(b, value: 10_002)
            try await publish(c, value: 10_003)
            #expect(try await nextEvents(a).map(\.value) == [10_003])
            // A kept event that expires before the subscriber comes back is never delivered.
            try await a.logout()
            try await publish(c, value: 10_004, expiry: 60, onlineOnly: false)
            try await publish(c, value: 10_005, expiry: 600, onlineOnly: false)
            clock.advance(seconds: 61)
            let again = try await gateway.connect(.tcp, user: "A")
            let events = try await nextEvents(again)
            #expect(events.map(\.value) == [1, 10_005])
            await again.close()
            await b.close()
            await c.close()
        }
    }

    @Test func offlineDeliveryAtNextLogin() async throws {
        try await withEventGateway { gateway, _ in
            let a = try await gateway.connect(.tcp, user: "A")
            _ = try await subscribe(a, ["B"])
            try await a.logout()
            let b = try await gateway.connect(.tcp, user: "B") { $0.clientType = .ios }
            try await publish(b, value: 10_010, onlineOnly: false, ext: "kept")
            try await publish(b, value: 10_011)  // online only: lost for A
            try await publish(b, value: 10_012, onlineOnly: false)
            let back = try await gateway.connect(.tcp, user: "A")
            let events = try await nextEvents(back)
            #expect(events.map(\.value) == [1, 10_010, 10_012])
            #expect(events.first?.onlineClientTypes == [.ios])
            #expect(events[1].ext == "kept")
            await back.close()
            await b.close()
        }
    }

    @Test func multiDeviceSync() async throws {
        try await withEventGateway { gateway, _ in
            let b1 = try await gateway.connect(.tcp, user: "B")
            let b2 = try await gateway.connect(.tcp, user: "B")
            try await publish(b1, value: 10_020, multiDeviceSync: false)
            try await publish(b1, value: 10_021, multiDeviceSync: true)
            #expect(try await nextEvents(b2).map(\.value) == [10_021])
            await b1.close()
            await b2.close()
        }
    }

    @Test func onlineStatesForLoginLogoutAndDrop() async throws {
        try await withEventGateway(grace: .milliseconds(200)) { gateway, _ in
            let a = try await gateway.connect(.tcp, user: "A")
            _ = try await subscribe(a, ["B"])
            let b = try await gateway.connect(.tcp, user: "B") { $0.clientType = .ios }
            var events = try await nextEvents(a)
            #expect(events.map(\.value) == [1] && events.first?.onlineClientTypes == [.ios] && events.first?.publisher == "B")
            let bWeb = try await gateway.connect(.unix, user: "B") { $0.clientType = .web }
            events = try await nextEvents(a)
            #expect(events.map(\.value) == [1] && events.first?.onlineClientTypes == [.ios, .web])
            try await bWeb.logout()
            events = try await nextEvents(a)
            #expect(events.map(\.value) == [2] && events.first?.onlineClientTypes == [.ios])
            try await b.logout()
            events = try await nextEvents(a)
            #expect(events.map(\.value) == [2] && events.first?.onlineClientTypes == [])
            let dropper = try await gateway.connect(.tcp, user: "B") { $0.clientType = .android }
            #expect(try await nextEvents(a).map(\.value) == [1])
            await dropper.close()
            events = try await nextEvents(a)
            #expect(events.map(\.value) == [3] && events.first?.onlineClientTypes == [])
            await a.close()
        }
    }

    /// A publisher's fan-out list is kept between fan-outs: it must follow subscribers who come, go, start and end
    /// sessions in between (each step changes one thing only, so a list kept too long fails it).
    @Test func fanOutFollowsSubscribersAndTheirSessionsBetweenEvents() async throws {
        try await withEventGateway { gateway, _ in
            let b = try await gateway.connect(.tcp, user: "B")
            let a = try await gateway.connect(.tcp, user: "A")
            let c = try await gateway.connect(.unix, user: "C")
            _ = try await subscribe(a, ["B"])
            _ = try await subscribe(c, ["B", "E"])
            try await publish(b, value: 10_100)
            for receiver in [a, c] { #expect(try await nextEvents(receiver).map(\.value) == [10_100]) }
            // Sessions only: A's session ends, another starts, a second device of A joins.
            try await a.logout()
            let a2 = try await gateway.connect(.tcp, user: "A")
            #expect(try await nextEvents(a2).map(\.value) == [1], "B's online state at login")
            let a3 = try await gateway.connect(.unix, user: "A")
            try await publish(b, value: 10_101)
            for receiver in [a2, a3, c] { #expect(try await nextEvents(receiver).map(\.value) == [10_101]) }
            // A subscription only: D (online already) subscribes.
            let d = try await gateway.connect(.tcp, user: "D")
            _ = try await subscribe(d, ["B"])
            try await publish(b, value: 10_102)
            for receiver in [a2, a3, c, d] { #expect(try await nextEvents(receiver).map(\.value) == [10_102]) }
            // An unsubscription only: C's next event is E's login, not B's next event.
            _ = try await c.send(.unsubscribeEvent(UnsubscribeEventRequest(publishers: ["B"])))
            try await publish(b, value: 10_103)
            for receiver in [a2, a3, d] { #expect(try await nextEvents(receiver).map(\.value) == [10_103]) }
            let e = try await gateway.connect(.tcp, user: "E")
            let forC = try await nextEvents(c)
            #expect(forC.map(\.publisher) == ["E"] && forC.map(\.value) == [1])
            for connection in [a2, a3, b, c, d, e] { await connection.close() }
        }
    }

    @Test func gracePeriodSuppressesFlap() async throws {
        let recorder = SessionRecorder()
        // 3 s: a reconnect on a loaded two-core machine comes back well within it.
        try await withEventGateway(grace: .seconds(3), observers: [recorder]) { gateway, _ in
            let a = try await gateway.connect(.tcp, user: "A")
            _ = try await subscribe(a, ["B"])
            let b = try await gateway.connect(.tcp, user: "B") { $0.clientType = .desktop }
            #expect(try await nextEvents(a).map(\.value) == [1])
            await b.close()
            #expect(await recorder.wait { $0.ended.count == 1 })  // the server saw the drop
            let droppedAt = ContinuousClock.now
            let back = try await gateway.connect(.tcp, user: "B") { $0.clientType = .desktop }
            try await Task.sleep(until: droppedAt + .milliseconds(3_300))  // past the grace period: no 3 was sent, nor a 1
            try await publish(back, value: 10_030)
            #expect(try await nextEvents(a).map(\.value) == [10_030])
            await a.close()
            await back.close()
        }
    }

    @Test func syncOnSubscribe() async throws {
        try await withEventGateway { gateway, _ in
            let b = try await gateway.connect(.tcp, user: "B") { $0.clientType = .ios }
            try await publish(b, value: 10_040, ext: "latest-but-one")
            try await publish(b, value: 10_041, ext: "latest")
            let a = try await gateway.connect(.tcp, user: "A")
            _ = try await subscribe(a, ["B", "Nobody"], sync: true)
            let events = try await nextEvents(a)
            #expect(events.map(\.value) == [1, 10_041])
            #expect(events.last?.ext == "latest")
            await a.close()
            await b.close()
        }
    }

    @Test func restartKeepsSubscriptionsAndKeptEvents() async throws {
        let database = TemporaryPath("sb-events", suffix: ".sqlite")
        defer { database.remove() }
        let path = database.path
        let clock = ManualClock()
        let kept = try await withEventGateway(path: path, clock: clock) { gateway, _ in
            let a = try await gateway.connect(.tcp, user: "A")
            _ = try await subscribe(a, ["B"], expiry: 120)
            try await a.logout()
            let b = try await gateway.connect(.tcp, user: "B")
            let kept = try await publish(b, value: 10_050, onlineOnly: false, ext: "survives")
            await b.close()
            return kept.eventId
        }
        clock.advance(seconds: 30)
        try await withEventGateway(path: path, clock: clock) { gateway, clock in
            let a = try await gateway.connect(.tcp, user: "A")
            let events = try await nextEvents(a)
            #expect(events.count == 2)
            #expect(events.first?.publisher == "B" && events.first?.value != 1)  // B is not online after the restart
            #expect(events.last?.eventId == kept && events.last?.ext == "survives")
            #expect(try await query(a, ["B"]).first?.remainingSeconds == 90)
            clock.advance(seconds: 90)
            #expect(try await query(a, ["B"]).isEmpty)
            await a.close()
        }
    }
}

@Suite struct EventFanOutTests {
    /// A publisher with many online subscribers logs in: every subscriber gets the online event quickly (one
    /// encoded push written to every session). 1,000 connections keep the test's file descriptors well below the
    /// limit when the suite runs in parallel.
    @Test func loginReachesManySubscribersQuickly() async throws {
        let count = 1_000
        try await withEventGateway { gateway, _ in
            let subscribers = try await withThrowingTaskGroup(of: SwitchboardConnection.self) { group in
                for index in 0..<count {
                    group.addTask {
                        let connection = try await gateway.connect(.tcp, user: "fan\(index)")
                        _ = try await subscribe(connection, ["Star"])
                        return connection
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let start = ContinuousClock.now
            let star = try await gateway.connect(.tcp, user: "Star")
            let received = try await withThrowingTaskGroup(of: Bool.self) { group in
                for subscriber in subscribers {
                    group.addTask { try await nextEvents(subscriber, seconds: 5).map(\.value) == [1] }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            let elapsed = ContinuousClock.now - start
            #expect(received == count)
            #expect(elapsed < .seconds(4), "fan-out took \(elapsed)")
            await star.close()
            for subscriber in subscribers { await subscriber.close() }
        }
    }
}

@Suite struct EventDurabilityTests {
    @Test func subscriptionsAndKeptEventsAreInTheDatabaseWhenAcknowledged() async throws {
        let database = TemporaryPath("sb-events", suffix: ".sqlite")
        defer { database.remove() }
        let path = database.path
        let clock = ManualClock()
        try await withEventGateway(path: path, clock: clock) { gateway, clock in
            let reader = try EventStore(path: path)
            let a = try await gateway.connect(.unix, user: "A")
            for index in 0..<10 {
                _ = try await subscribe(a, ["P\(index)"])
                // Read through a second connection at once, without any flush.
                #expect(try reader.load(nowMillis: clock.now).subscriptions.contains { $0.publisher == "P\(index)" })
            }
            let kept = try await publish(a, value: 10_001, onlineOnly: false)
            #expect(try reader.load(nowMillis: clock.now).keptEvents.contains { $0.eventId == kept.eventId })
            _ = try await a.send(.unsubscribeEvent(UnsubscribeEventRequest(publishers: ["P0"])))
            #expect(try !reader.load(nowMillis: clock.now).subscriptions.contains { $0.publisher == "P0" })
        }
    }

    /// Regression (found by the remote fuzzer, `sbfuzz remote --seed 1`): a kept event whose value is above
    /// `Int64.max` trapped the store's writer thread (`Int64(value)`), which took the whole gateway down.
    @Test func eventValuesAboveInt64MaxAreKeptAndReadBackUnchanged() async throws {
        let store = try EventStore(path: nil)
        for value in [UInt64(Int64.max) + 1, UInt64.max] {
            let event = SubscribedEvent(
                eventId: "e\(value)", eventType: 1, value: value, publisher: "P", timestampMs: 1_000,
                expiresAtMs: UInt64(Int64.max))
            store.keep(event, limit: 100)
            store.setOnlineState(event)
        }
        store.flush()
        let snapshot = try store.load(nowMillis: 2_000)
        #expect(snapshot.keptEvents.map(\.value) == [UInt64(Int64.max) + 1, UInt64.max])
        #expect(snapshot.onlineStates.map(\.value) == [UInt64.max])
    }

    /// The same over the protocol: publishing such a value is answered (whatever the answer) and the gateway goes on.
    @Test func publishingAnEventValueAboveInt64MaxLeavesTheGatewayRunning() async throws {
        let database = TemporaryPath("sb-events", suffix: ".sqlite")
        defer { database.remove() }
        let path = database.path
        try await withEventGateway(path: path) { gateway, clock in
            let a = try await gateway.connect(.unix, user: "A")
            for value in [UInt64(Int64.max) + 1, UInt64.max] {
                let answer = try? await publish(a, value: value, onlineOnly: false)
                if let answer {
                    let reader = try EventStore(path: path)
                    #expect(try reader.load(nowMillis: clock.now).keptEvents.first { $0.eventId == answer.eventId }?.value == value)
                }
            }
            _ = try await publish(a, value: 10_000, onlineOnly: false)
        }
    }

    @Test func aChangeTheDatabaseRefusesIsAnsweredStorageFailureAndUndone() async throws {
        let database = TemporaryPath("sb-events", suffix: ".sqlite")
        defer { database.remove() }
        let path = database.path
        try await withEventGateway(path: path) { gateway, _ in
            let a = try await gateway.connect(.unix, user: "A")
            _ = try await subscribe(a, ["kept"])
            try injectStorageFailure(
                path: path,
                trigger: """
                    CREATE TRIGGER refuse_subscription BEFORE INSERT ON event_subscription WHEN NEW.publisher = 'refused'
                    BEGIN SELECT RAISE(ABORT, 'injected failure'); END;
                    CREATE TRIGGER refuse_unsubscribe BEFORE DELETE ON event_subscription WHEN OLD.publisher = 'kept'
                    BEGIN SELECT RAISE(ABORT, 'injected failure'); END;
                    CREATE TRIGGER refuse_event BEFORE INSERT ON kept_event WHEN NEW.ext = 'refused'
                    BEGIN SELECT RAISE(ABORT, 'injected failure'); END;
                    """)
            // The whole call fails: the valid publisher beside the refused one is not subscribed either.
            await expectError(.storageFailure) { _ = try await subscribe(a, ["fine", "refused"]) }
            #expect(try await query(a, ["fine", "refused"]).isEmpty)
            await expectError(.storageFailure) {
                _ = try await a.send(.unsubscribeEvent(UnsubscribeEventRequest(publishers: ["kept"])))
            }
            #expect(try await query(a, ["kept"]).map(\.publisher) == ["kept"])
            await expectError(.storageFailure) { _ = try await publish(a, value: 10_002, onlineOnly: false, ext: "refused") }
            // Other changes still work.
            _ = try await subscribe(a, ["fine"])
            #expect(try await query(a, ["fine"]).map(\.publisher) == ["fine"])
        }
    }
}
