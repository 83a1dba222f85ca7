import Foundation
import SwitchboardClient
import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// Event subscriptions, kept events and online state across the nodes of a cluster: whichever node the subscriber
/// and the publisher are on, every rule of a single gateway holds.
@Suite("Cluster events", .serialized, .timeLimit(.minutes(3)))
struct ClusterEventTests {
    @Test("a subscription made on one node gets the events published on another, and the publisher's other devices too")
    func aSubscriptionOnOneNodeGetsAnEventPublishedOnAnother() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            let ann = try await nodes[0].client("Ann")
            let annEvents = SubscribedEventIterator(ann.subscribedEvents)
            try await ann.subscribeEvent(publishers: ["Bob"], expirySeconds: 600)
            let bob = try await nodes[1].client("Bob")
            let bobOther = try await nodes[2].client("Bob")
            let bobOtherEvents = SubscribedEventIterator(bobOther.subscribedEvents)
            // Bob's logins (value 1) reach Ann first.
            #expect(await annEvents.next(seconds: 10)?.value == 1)
            #expect(await annEvents.next(seconds: 10)?.value == 1)
            let published = try await bob.publishEvent(value: 10_001, ext: "hello")
            let event = try #require(await annEvents.next(seconds: 10), "no event on the subscriber's node")
            #expect(event.value == 10_001 && event.publisher == "Bob" && event.ext == "hello")
            #expect(event.eventId == published.eventId)
            let synced = try #require(await bobOtherEvents.next(seconds: 10), "no event on the publisher's other device")
            #expect(synced.value == 10_001 && synced.eventId == published.eventId)
            try await bob.publishEvent(value: 10_002, multiDeviceSync: false)
            #expect(await annEvents.next(seconds: 10)?.value == 10_002)
            for client in [ann, bob, bobOther] { await client.close() }
        }
    }

    @Test("subscriptions made on one node are queried on another, and an unsubscribe on a third ends them everywhere")
    func subscriptionsMadeOnOneNodeAreQueriedOnAnother() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            let onA = try await nodes[0].client("Ann")
            let subscribed = try await onA.subscribeEvent(publishers: ["Bob", "Cy", ""], expirySeconds: 3_600)
            #expect(subscribed.failedPublishers == [""])
            let onC = try await nodes[2].client("Ann")
            let seen = try await eventually {
                let found = try await onC.queryEventSubscriptions(publishers: ["Bob", "Cy", "Dee"])
                return found.subscriptions.map(\.publisher) == ["Bob", "Cy"]
            }
            #expect(seen, "node C does not see the subscriptions made on node A")
            let found = try await onC.queryEventSubscriptions(publishers: ["Bob"]).subscriptions
            #expect(found.first.map { $0.expiresAtMs - $0.subscribedAtMs } == 3_600_000)
            #expect(found.first.map { (3_598...3_600).contains($0.remainingSeconds) } == true)

            let onB = try await nodes[1].client("Ann")
            try await onB.unsubscribeEvent(publishers: ["Bob"])
            let gone = try await eventually {
                let seenOnC = try await onC.queryEventSubscriptions(publishers: ["Bob", "Cy"]).subscriptions
                let seenOnA = try await onA.queryEventSubscriptions(publishers: ["Bob", "Cy"]).subscriptions
                return seenOnC.map(\.publisher) == ["Cy"] && seenOnA.map(\.publisher) == ["Cy"]
            }
            #expect(gone, "the unsubscribe made on node B is not seen on the other nodes")
            for client in [onA, onB, onC] { await client.close() }
        }
    }

    @Test("kept events published on one node while the subscriber was offline reach them once when they log in on another")
    func keptEventsReachAnOfflineSubscriberOnceOnAnotherNode() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            let ann = try await nodes[0].client("Ann")
            try await ann.subscribeEvent(publishers: ["Bob"], expirySeconds: 600)
            try await ann.logout()
            let bob = try await nodes[1].client("Bob", clientType: .ios)
            try await bob.publishEvent(value: 10_010, onlineOnly: false, ext: "kept")
            try await bob.publishEvent(value: 10_011)  // online only: lost for Ann
            try await bob.publishEvent(value: 10_012, onlineOnly: false)

            let back = try await nodes[2].client("Ann")
            let events = SubscribedEventIterator(back.subscribedEvents)
            let received = await events.take(3, seconds: 10)
            #expect(received.map(\.value) == [1, 10_010, 10_012])
            #expect(received.first?.onlineClientTypes == [.ios])
            #expect(received.dropFirst().first?.ext == "kept")
            // A second session (on another node) is not the first: no second delivery. Bob's next event, published
            // after it logged in, is the next thing either session gets.
            let second = try await nodes[0].client("Ann")
            let secondEvents = SubscribedEventIterator(second.subscribedEvents)
            try await bob.publishEvent(value: 10_013)
            #expect(await events.next(seconds: 10)?.value == 10_013)
            #expect(await secondEvents.next(seconds: 10)?.value == 10_013)

            // Offline again; a new kept event; logging in on two nodes at once delivers it to exactly one session.
            try await back.logout()
            try await second.logout()
            try await bob.publishEvent(value: 10_014, onlineOnly: false)
            async let c1 = nodes[1].client("Ann")
            async let c2 = nodes[2].client("Ann")
            let racers = try await [c1, c2]
            let racing = racers.map { SubscribedEventIterator($0.subscribedEvents) }
            try await bob.publishEvent(value: 10_015)
            for iterator in racing {
                #expect(await iterator.waitFor(seconds: 10) { $0.value == 10_015 }, "the marker event did not arrive")
            }
            let kept = racing.map { $0.all.filter { $0.value == 10_014 }.count }
            #expect(kept.reduce(0, +) == 1, "kept event delivered \(kept) times")
            for client in racers + [ann, bob] { await client.close() }
        }
    }

    @Test("online state: a login and a logout on one node reach a subscriber on another; a drop is value 3 after the grace")
    func onlineStatesCrossNodes() async throws {
        try await withCluster(nodes: 3) { postgres, nodes in
            let ann = try await nodes[0].client("Ann")
            let events = SubscribedEventIterator(ann.subscribedEvents)
            try await ann.subscribeEvent(publishers: ["Bob"], expirySeconds: 600)
            let bob = try await nodes[1].client("Bob", clientType: .ios)
            var event = try #require(await events.next(seconds: 10))
            #expect(event.value == 1 && event.publisher == "Bob" && event.onlineClientTypes == [.ios])
            let bobWeb = try await nodes[2].client("Bob", clientType: .web)
            event = try #require(await events.next(seconds: 10))
            #expect(event.value == 1 && event.onlineClientTypes == [.ios, .web])
            try await bobWeb.logout()
            event = try #require(await events.next(seconds: 10))
            #expect(event.value == 2 && event.onlineClientTypes == [.ios])
            try await bob.logout()
            event = try #require(await events.next(seconds: 10))
            #expect(event.value == 2 && event.onlineClientTypes == [])

            // A drop on one node and a return of the same client type on another within the grace period: no flap.
            let dropper = try await nodes[1].client("Bob", clientType: .android)
            #expect(await events.next(seconds: 10)?.value == 1)
            await dropper.close()
            // The return comes after node B recorded the drop.
            let settled = try await eventually { try await postgres.psql("SELECT count(*) FROM sb_event_drop") == "1" }
            #expect(settled)
            let returned = try await nodes[2].client("Bob", clientType: .android)
            try await returned.publishEvent(value: 10_100)
            event = try #require(await events.next(seconds: 10))
            #expect(event.value == 10_100, "expected no online-state event for a return within the grace, got \(event.value)")
            // A drop without return: value 3 once the grace period (2 s) passed.
            await returned.close()
            event = try #require(await events.next(seconds: 10))
            #expect(event.value == 3 && event.onlineClientTypes == [])
            // A subscriber who syncs on another node sees the current state.
            let cy = try await nodes[2].client("Cy")
            let cyEvents = SubscribedEventIterator(cy.subscribedEvents)
            try await cy.subscribeEvent(publishers: ["Bob"], expirySeconds: 600, syncEnabled: true)
            let synced = await cyEvents.take(2, seconds: 10)
            #expect(
                synced.map(\.value) == [3, 10_100],
                "synced \(synced.map { "\($0.value) \($0.eventId)" }), Ann got \(events.all.map { "\($0.value) \($0.eventId)" })")
            for client in [ann, cy] { await client.close() }
        }
    }
}

extension ClusterEventTests {
    @Test("subscriptions, kept events and online states are in PostgreSQL: a cluster started again on it serves them")
    func subscriptionsAndKeptEventsOutliveTheNodes() async throws {
        let postgres = try await TestPostgres.start()
        let outcome = await Result {
            try await withCluster(nodes: 2, postgres: postgres) { _, nodes in
                let ann = try await nodes[0].client("Ann")
                try await ann.subscribeEvent(publishers: ["Bob"], expirySeconds: 600)
                try await ann.logout()
                let bob = try await nodes[1].client("Bob", clientType: .ios)
                let kept = try await bob.publishEvent(value: 10_300, onlineOnly: false, ext: "while you were away")
                try await bob.logout()
                return kept.eventId
            }
        }
        let restarted = await Result {
            try await withCluster(nodes: 2, postgres: postgres) { _, nodes in
                let ann = try await nodes[1].client("Ann")
                let events = SubscribedEventIterator(ann.subscribedEvents)
                let synced = await events.take(2, seconds: 10)
                let found = try await ann.queryEventSubscriptions(publishers: ["Bob"]).subscriptions
                await ann.close()
                return (synced, found)
            }
        }
        await postgres.stop()
        let keptID = try outcome.get()
        let (synced, found) = try restarted.get()
        #expect(found.map(\.publisher) == ["Bob"])
        #expect(synced.map(\.value) == [2, 10_300] && synced.first?.onlineClientTypes == [])
        #expect(synced.last?.eventId == keptID && synced.last?.ext == "while you were away")
    }
}

/// Online state when a node dies, with real `switchboard --cluster` processes.
@Suite("Cluster events across processes", .serialized, .timeLimit(.minutes(3)))
struct ClusterEventProcessTests {
    @Test("kill -9 of a node: its user's subscribers get value 3 once, and the user stays online on another node")
    func aKilledNodesUserGoesOfflineThereOnce() async throws {
        try await ClusterProcessTests.withNodes(3) { _, nodes in
            let ann = try await nodes[0].client("Ann")
            let events = SubscribedEventIterator(ann.subscribedEvents)
            try await ann.subscribeEvent(publishers: ["Bob"], expirySeconds: 600)
            let onB = try await nodes[1].client("Bob", clientType: .ios)
            var event = try #require(await events.next(seconds: 20))
            #expect(event.value == 1 && event.onlineClientTypes == [.ios])
            let onC = try await nodes[2].client("Bob", clientType: .web)
            event = try #require(await events.next(seconds: 20))
            #expect(event.value == 1 && event.onlineClientTypes == [.ios, .web])

            nodes[1].process.signal(SIGKILL)
            _ = await nodes[1].process.waitForExit()
            // Seen dead within the node timeout (10 s); one of the two survivors sweeps it.
            event = try #require(await events.next(seconds: 25), "no value 3 for the killed node's session")
            #expect(event.value == 3 && event.publisher == "Bob" && event.onlineClientTypes == [.web])
            try await onC.publishEvent(value: 10_200)
            event = try #require(await events.next(seconds: 10))
            #expect(event.value == 10_200, "expected the next event after value 3, got \(event.value)")
            #expect(events.all.filter { $0.value == 3 }.count == 1)

            // Bob is still online (on node C): a subscriber syncing there sees it, and Bob's logout is value 2.
            let cy = try await nodes[2].client("Cy")
            let cyEvents = SubscribedEventIterator(cy.subscribedEvents)
            try await cy.subscribeEvent(publishers: ["Bob"], expirySeconds: 600, syncEnabled: true)
            let synced = await cyEvents.take(2, seconds: 10)
            #expect(synced.map(\.value) == [3, 10_200] && synced.first?.onlineClientTypes == [.web])
            try await onC.logout()
            event = try #require(await events.next(seconds: 10))
            #expect(event.value == 2 && event.onlineClientTypes == [])
            for client in [ann, cy, onB] { await client.close() }
        }
    }
}

extension ClusterEventProcessTests {
    @Test("a node stopped with SIGTERM: its user's subscribers get value 3 once the grace period passed, once")
    func aStoppedNodesUserGoesOfflineOnce() async throws {
        try await ClusterProcessTests.withNodes(2) { postgres, nodes in
            let ann = try await nodes[0].client("Ann")
            let events = SubscribedEventIterator(ann.subscribedEvents)
            try await ann.subscribeEvent(publishers: ["Bob"], expirySeconds: 600)
            let bob = try await nodes[1].client("Bob", clientType: .android)
            #expect(await events.next(seconds: 20)?.value == 1)
            nodes[1].process.signal(SIGTERM)
            #expect(await nodes[1].process.waitForExit(seconds: 30) == 0)
            let event = try #require(await events.next(seconds: 10), "no value 3 for the stopped node's session")
            #expect(event.value == 3 && event.publisher == "Bob" && event.onlineClientTypes == [])
            // Nothing of the node is left for the others to sweep.
            #expect(try await postgres.psql("SELECT count(*) FROM sb_session") == "1")  // Ann's
            #expect(try await postgres.psql("SELECT count(*) FROM sb_event_drop") == "0")
            let marker = try await nodes[0].client("Bob")
            #expect(await events.next(seconds: 10)?.value == 1)
            #expect(events.all.filter { $0.value == 3 }.count == 1)
            for client in [ann, bob, marker] { await client.close() }
        }
    }
}

extension ClusterEventTests {
    @Test("sb_session holds every node's live sessions: a user is online while any node has one of theirs")
    func theSessionTableFollowsSessionsOnEveryNode() async throws {
        try await withCluster(nodes: 2) { postgres, nodes in
            let count = "SELECT count(*) FROM sb_session WHERE user_id = convert_to('Bob', 'UTF8')"
            let onA = try await nodes[0].client("Bob", clientType: .ios)
            let onB = try await nodes[1].client("Bob", clientType: .web)
            let settled2 = try await eventually { try await postgres.psql(count) == "2" }
            #expect(settled2)
            try await onA.logout()
            let settled3 = try await eventually { try await postgres.psql(count) == "1" }
            #expect(settled3)
            await onB.close()
            let settled4 = try await eventually { try await postgres.psql(count) == "0" }
            #expect(settled4)
            // The abnormal end waits for its grace period; the logout left the user's offline time.
            #expect(try await postgres.psql("SELECT count(*) FROM sb_event_drop") == "1")
            #expect(try await postgres.psql("SELECT count(*) FROM sb_event_offline") == "1")
        }
    }
}

extension ClusterEventTests {
    @Test(
        "a subscribe through one node and at once an unsubscribe through another, or the reverse, leave every node with the last one"
    )
    func aSubscriptionChangedThroughTwoNodesAtOnceEndsAsTheLastChange() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            let rounds = 30
            var sessions: [SwitchboardClient] = []
            for node in nodes { sessions.append(try await node.client("Ann")) }
            let received = sessions.map { SubscribedEventIterator($0.subscribedEvents) }
            // The publishers (and the marker, which every node's session is subscribed to) log in first: no online
            // states come from them afterwards.
            let marker = try await nodes[2].client("Marker")
            var publishers: [SwitchboardClient] = []
            for round in 0..<rounds { publishers.append(try await nodes[2].client("P\(round)")) }
            try await sessions[0].subscribeEvent(publishers: ["Marker"], expirySeconds: 600)

            // Each round through another pair of nodes; odd rounds end subscribed.
            var expected: Set<String> = []
            for round in 0..<rounds {
                let publisher = "P\(round)"
                let first = sessions[round % 3]
                let second = sessions[(round + 1) % 3]
                if round % 2 == 0 {
                    try await first.subscribeEvent(publishers: [publisher], expirySeconds: 600)
                    try await second.unsubscribeEvent(publishers: [publisher])
                } else {
                    try await first.unsubscribeEvent(publishers: [publisher])
                    try await second.subscribeEvent(publishers: [publisher], expirySeconds: 600)
                    expected.insert(publisher)
                }
            }
            let all = (0..<rounds).map { "P\($0)" }
            let wanted = expected
            for (index, session) in sessions.enumerated() {
                let held = try await eventually(seconds: 10) {
                    let found = try await session.queryEventSubscriptions(publishers: all).subscriptions.map(\.publisher)
                    return Set(found) == wanted
                }
                let found = try await session.queryEventSubscriptions(publishers: all).subscriptions.map(\.publisher)
                #expect(
                    held, "node \(index + 1) holds \(found.sorted()); the last changes leave \(wanted.sorted())")
            }

            // Every publisher publishes, then the marker (all on one node, so in that order everywhere): each node's
            // session gets the events of exactly the publishers it ended subscribed to.
            for (round, publisher) in publishers.enumerated() { try await publisher.publishEvent(value: 20_000 + UInt64(round)) }
            try await marker.publishEvent(value: 10_999)
            for (index, iterator) in received.enumerated() {
                #expect(await iterator.waitFor(seconds: 10) { $0.value == 10_999 }, "node \(index + 1): no marker")
                let delivered = Set(iterator.all.filter { $0.value >= 20_000 }.map(\.publisher))
                #expect(
                    delivered == expected,
                    "node \(index + 1) delivered \(delivered.sorted()); expected \(expected.sorted())")
            }
            for client in sessions + publishers + [marker] { await client.close() }
        }
    }
}

extension ClusterNode {
    /// A connected client of this node with a client type.
    func client(_ user: String, clientType: ClientType) async throws -> SwitchboardClient {
        var configuration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: self.port), userID: user)
        configuration.requestTimeout = .seconds(20)
        configuration.clientType = clientType
        let client = SwitchboardClient(configuration: configuration, reconnectPolicy: .never)
        try await client.connect()
        return client
    }
}
