import SwitchboardClient
import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// Channel locks across the nodes of a cluster, over real sockets: a lock is one lease row in PostgreSQL, so it
/// guards writes and refuses other holders through every node.
@Suite("Cluster locks", .serialized, .timeLimit(.minutes(3)))
struct ClusterLockTests {
    /// The error code a call failed with (nil when it succeeded).
    static func code(_ call: () async throws -> Void) async -> ErrorCode? {
        do {
            try await call()
            return nil
        } catch let error as SwitchboardClientError {
            return error.code
        } catch {
            return .internal
        }
    }

    @Test("a lock held through one node blocks other holders and lock-guarded writes through another")
    func aLockHeldOnOneNodeGuardsWritesOnAnother() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            let holder = try await nodes[0].client("Tony")
            let rival = try await nodes[1].client("Ana")
            try await holder.setLock(channel: "doc", name: "edit", ttlSeconds: 30)
            try await holder.acquireLock(channel: "doc", name: "edit")

            // The other nodes see the holder at once: the operations are decided on the committed lease row.
            #expect(await Self.code { try await rival.acquireLock(channel: "doc", name: "edit") } == .lockHeld)
            #expect(
                await Self.code {
                    _ = try await rival.setChannelMetadata(
                        channel: "doc", items: [MetadataItem(key: "body", value: "rival")], lock: "edit")
                } == .lockNotHeld)
            #expect(await Self.code { try await rival.setLock(channel: "doc", name: "edit") } == .lockAlreadyExists)
            #expect(await Self.code { try await rival.releaseLock(channel: "doc", name: "edit") } == .lockNotHeld)

            // The holder writes under the lock through any node.
            let holderElsewhere = try await nodes[2].client("Tony")
            _ = try await holderElsewhere.setChannelMetadata(
                channel: "doc", items: [MetadataItem(key: "body", value: "mine")], lock: "edit")
            let locks = try await nodes[1].client("Reader").getLocks(channel: "doc")
            #expect(locks.locks.map(\.owner) == ["Tony"] && locks.locks.map(\.ttlSeconds) == [30])

            // Released on one node, the lock is free on the others.
            try await holder.releaseLock(channel: "doc", name: "edit")
            try await rival.acquireLock(channel: "doc", name: "edit")
            #expect(
                await Self.code {
                    _ = try await holderElsewhere.setChannelMetadata(
                        channel: "doc", items: [MetadataItem(key: "body", value: "late")], lock: "edit")
                } == .lockNotHeld)
            let read = try await holder.getChannelMetadata(channel: "doc")
            #expect(read.items.map(\.value) == ["mine"])
            for client in [holder, rival, holderElsewhere] { await client.close() }
        }
    }

    @Test("concurrent acquires of one lock spread over three nodes have exactly one winner")
    func concurrentAcquiresAcrossNodesHaveOneWinner() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            var clients: [SwitchboardClient] = []
            for index in 0..<9 { clients.append(try await nodes[index % 3].client("racer\(index)")) }
            try await clients[0].setLock(channel: "race", name: "baton")
            let outcomes = await withTaskGroup(of: ErrorCode?.self) { group in
                for client in clients {
                    group.addTask { await Self.code { try await client.acquireLock(channel: "race", name: "baton") } }
                }
                var outcomes: [ErrorCode?] = []
                for await outcome in group { outcomes.append(outcome) }
                return outcomes
            }
            #expect(outcomes.filter { $0 == nil }.count == 1)
            #expect(outcomes.filter { $0 == .lockHeld }.count == 8)
            let owners = try await clients[4].getLocks(channel: "race").locks.map(\.owner)
            #expect(owners.count == 1 && owners[0].hasPrefix("racer"))
            for client in clients { await client.close() }
        }
    }

    @Test("a request waiting in line on one node gets the lock released on another, and lock events reach every node")
    func aWaiterOnOneNodeGetsALockReleasedOnAnother() async throws {
        try await withCluster(nodes: 3) { _, nodes in
            let watcher = try await nodes[2].client("Watcher")
            let events = LockEventCollector(watcher.lockEvents)
            try await watcher.subscribeChannel(channel: "queue", options: ChannelSubscriptionOptions(withLock: true))
            #expect(await events.next(seconds: 5)?.eventType == .snapshot)

            let holder = try await nodes[0].client("Tony")
            let waiter = try await nodes[1].client("Ana")
            try await holder.setLock(channel: "queue", name: "turn")
            try await holder.acquireLock(channel: "queue", name: "turn")
            let waiting = Task { await Self.code { try await waiter.acquireLock(channel: "queue", name: "turn", waitInLine: true, timeout: .seconds(20)) } }
            // Waits until the request is in line (stored), then releases on the holder's node.
            try await Task.sleep(for: .milliseconds(300))
            try await holder.releaseLock(channel: "queue", name: "turn")
            #expect(await waiting.value == nil, "the waiting acquire on another node was not granted")
            // The watcher's node reads its copy, which the change feed brings up to date within moments.
            let settled = try await eventually { try await watcher.getLocks(channel: "queue").locks.map(\.owner) == ["Ana"] }
            #expect(settled)

            var seen: [(LockEventType, String)] = []
            while seen.count < 4, let event = await events.next(seconds: 5) {
                seen.append((event.eventType, event.locks.first?.owner ?? ""))
            }
            #expect(seen.map(\.0) == [.set, .acquired, .released, .acquired])
            #expect(seen.map(\.1) == ["", "Tony", "", "Ana"])
            for client in [watcher, holder, waiter] { await client.close() }
        }
    }

    @Test("a removed lock cancels a request waiting on another node, and its holder's lease runs out on every node")
    func removalCancelsRemoteWaitersAndLeasesExpire() async throws {
        try await withCluster(nodes: 2) { _, nodes in
            let holder = try await nodes[0].client("Tony")
            let waiter = try await nodes[1].client("Ana")
            try await holder.setLock(channel: "room", name: "a")
            try await holder.acquireLock(channel: "room", name: "a")
            let waiting = Task { await Self.code { try await waiter.acquireLock(channel: "room", name: "a", waitInLine: true, timeout: .seconds(20)) } }
            try await Task.sleep(for: .milliseconds(300))
            try await holder.removeLock(channel: "room", name: "a")
            #expect(await waiting.value == .lockWaitCancelled)

            // A lease with the shortest TTL: its holder leaves, and another node frees it when it runs out.
            let watcher = try await nodes[1].client("Watcher")
            let events = LockEventCollector(watcher.lockEvents)
            try await watcher.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withLock: true))
            #expect(await events.next(seconds: 5)?.eventType == .snapshot)
            try await holder.setLock(channel: "room", name: "b", ttlSeconds: 10)
            try await holder.acquireLock(channel: "room", name: "b")
            await holder.close()
            let left = ContinuousClock.now
            var expired: LockEvent?
            while expired == nil, let event = await events.next(seconds: 20) {
                if event.eventType == .expired { expired = event }
            }
            let elapsed = ContinuousClock.now - left
            #expect(expired?.locks.first?.lockName == "b")
            #expect(elapsed >= .seconds(9) && elapsed < .seconds(15), "expired after \(elapsed)")
            #expect(try await waiter.getLocks(channel: "room").locks.map(\.owner) == [""])
            for client in [waiter, watcher] { await client.close() }
        }
    }

    @Test("a holder's lease starts running out only when their last session on any node ends")
    func aHolderConnectedToAnotherNodeKeepsTheLock() async throws {
        try await withCluster(nodes: 2) { _, nodes in
            let watcher = try await nodes[1].client("Watcher")
            let events = LockEventCollector(watcher.lockEvents)
            try await watcher.subscribeChannel(channel: "desk", options: ChannelSubscriptionOptions(withLock: true))
            #expect(await events.next(seconds: 5)?.eventType == .snapshot)
            let onFirst = try await nodes[0].client("Tony")
            let onSecond = try await nodes[1].client("Tony")
            try await onFirst.setLock(channel: "desk", name: "pen", ttlSeconds: 10)
            try await onFirst.acquireLock(channel: "desk", name: "pen")
            #expect(await events.next(seconds: 5)?.eventType == .set)
            #expect(await events.next(seconds: 5)?.eventType == .acquired)

            // Tony leaves the first node but is still on the second: the lease does not run.
            await onFirst.close()
            #expect(await events.next(seconds: 13) == nil, "the lock changed while its holder was still connected")
            #expect(try await watcher.getLocks(channel: "desk").locks.map(\.owner) == ["Tony"])

            // His last session ends: the lease runs out TTL seconds later.
            await onSecond.close()
            let left = ContinuousClock.now
            let expired = await events.next(seconds: 20)
            let elapsed = ContinuousClock.now - left
            #expect(expired?.eventType == .expired && expired?.locks.first?.lockName == "pen")
            #expect(elapsed >= .seconds(9) && elapsed < .seconds(15), "expired after \(elapsed)")
            await watcher.close()
        }
    }
}
