import Foundation
import SwitchboardClient
import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The replay of online-only events on a cluster (`resumeEvents`, `Protocol/SPEC.md` SB-13.4-9): a node numbers the
/// events other nodes publish as it delivers them, in its own epoch; resuming that position on another node answers
/// `gap`.
@Suite("Cluster event replay", .serialized, .timeLimit(.minutes(3)))
struct ClusterEventReplayTests {
    @Test("an event published on node 2 is numbered by node 1 and replayed there; resuming it on node 2 answers gap")
    func anotherNodesEventIsReplayedOnTheSubscribersNodeAndResumingElsewhereIsAGap() async throws {
        try await withCluster(nodes: 2) { _, nodes in
            let ann = try await nodes[0].client("Ann")
            let annEvents = SubscribedEventIterator(ann.subscribedEvents)
            let subscribed = try await ann.subscribeEvent(publishers: ["Bob"], expirySeconds: 600)
            let bob = try await nodes[1].client("Bob")
            #expect(await annEvents.next(seconds: 10)?.value == 1)  // Bob's login
            try await bob.publishEvent(value: 10_001)
            let event = try #require(await annEvents.next(seconds: 10), "no event on the subscriber's node")
            #expect(event.value == 10_001)
            #expect(event.epoch == subscribed.epoch && event.position > subscribed.position)

            // On node 1 (the subscriber's), the event is held: a resume from just before it replays it.
            let again = try await nodes[0].client("Ann")
            let againEvents = SubscribedEventIterator(again.subscribedEvents)
            let here = try await again.resumeEvents(epoch: event.epoch, after: event.position - 1)
            #expect(!here.gap && here.replayed == 1 && here.epoch == event.epoch)
            var replayed: SubscribedEvent?
            while let next = await againEvents.next(seconds: 10) {
                if next.value == 10_001 {
                    replayed = next
                    break
                }
            }
            #expect(replayed?.eventId == event.eventId && replayed?.position == event.position)

            // Node 2 numbers its own: node 1's position is another epoch there.
            let elsewhere = try await nodes[1].client("Ann")
            let there = try await elsewhere.resumeEvents(epoch: event.epoch, after: event.position)
            #expect(there.gap && there.replayed == 0 && there.epoch != event.epoch)
            for client in [ann, bob, again, elsewhere] { await client.close() }
        }
    }
}
