import SwitchboardStore
import SwitchboardWire
import Testing

/// A store with a controlled clock and a recorder of lock events.
private struct LockFixture {
    let clock = ManualClock()
    let events = Recorder<LockEvent>()
    let store: MetadataStore

    init() {
        self.store = memoryStore(clock: self.clock.storeClock)
        let events = self.events
        self.store.setLockEventHandler { events.append($0) }
    }

    /// "type:lock:owner" for each event so far.
    var eventLog: [String] {
        self.events.all.map { event in
            "\(event.eventType):\(event.locks.map(\.lockName).joined()):\(event.locks.map(\.owner).joined())"
        }
    }

    func setLock(_ name: String = "mic", ttl: UInt64 = 10) throws(SwitchboardStoreError) {
        try self.store.setLock(channel: "room", channelType: .message, name: name, ttlSeconds: ttl)
    }

    func acquire(_ user: String, _ name: String = "mic", session: String? = nil, retry: Bool = false) async throws {
        try await self.store.acquireLock(
            channel: "room", channelType: .message, name: name, userID: user, session: session ?? "\(user)-s1",
            retry: retry)
    }

    /// Starts a waiting acquire and returns where its answer lands.
    func acquireInLine(_ user: String, _ name: String = "mic", session: String? = nil) -> Recorder<
        Result<Void, SwitchboardStoreError>
    > {
        let answers = Recorder<Result<Void, SwitchboardStoreError>>()
        self.store.acquireLock(
            channel: "room", channelType: .message, name: name, userID: user, session: session ?? "\(user)-s1",
            retry: true
        ) { answers.append($0) }
        return answers
    }

    func release(_ user: String, _ name: String = "mic") throws(SwitchboardStoreError) {
        try self.store.releaseLock(channel: "room", channelType: .message, name: name, userID: user)
    }

    func holder(_ name: String = "mic") -> String? {
        try? self.store.getLocks(channel: "room", channelType: .message).first { $0.lockName == name }?.owner
    }
}

private func succeeded(_ answers: Recorder<Result<Void, SwitchboardStoreError>>) -> Bool {
    answers.all.count == 1 && (try? answers.all[0].get()) != nil
}

private func failedCode(_ answers: Recorder<Result<Void, SwitchboardStoreError>>) -> ErrorCode? {
    guard answers.all.count == 1, case .failure(let error) = answers.all[0] else { return nil }
    return error.code
}

@Suite("Channel locks")
struct LockTests {
    // MARK: setLock and getLocks

    @Test func setLockCreatesAFreeLockAndReportsIt() throws {
        let fixture = LockFixture()
        try fixture.setLock("mic", ttl: 30)
        try fixture.setLock("stage")
        #expect(
            try fixture.store.getLocks(channel: "room", channelType: .message) == [
                LockDetail(lockName: "mic", owner: "", ttlSeconds: 30),
                LockDetail(lockName: "stage", owner: "", ttlSeconds: 10),
            ])
        #expect(fixture.eventLog == ["set:mic:", "set:stage:"])
        let event = fixture.events.all[0]
        #expect(event.channel == "room")
        #expect(event.channelType == .message)
        #expect(event.timestampMs == fixture.clock.ms)
    }

    @Test func setLockOnAnExistingNameFailsWithLockAlreadyExists() throws {
        let fixture = LockFixture()
        try fixture.setLock()
        #expect(throws: SwitchboardStoreError.self) { try fixture.setLock() }
        do { try fixture.setLock() } catch { #expect(error.code == .lockAlreadyExists) }
    }

    @Test(arguments: [0, 9, 301, 10_000] as [UInt64])
    func lockTtlsOutside10To300SecondsAreInvalid(ttl: UInt64) {
        let fixture = LockFixture()
        do {
            try fixture.setLock(ttl: ttl)
            Issue.record("ttl \(ttl) accepted")
        } catch {
            #expect(error.code == .invalidLockTtl)
        }
    }

    @Test func lockTtlsOf10And300SecondsAreAccepted() throws {
        let fixture = LockFixture()
        try fixture.setLock("short", ttl: 10)
        try fixture.setLock("long", ttl: 300)
    }

    @Test func aChannelHoldsAtMost32Locks() throws {
        let fixture = LockFixture()
        for index in 0..<32 { try fixture.setLock("lock\(index)") }
        do {
            try fixture.setLock("one-too-many")
            Issue.record("33rd lock accepted")
        } catch {
            #expect(error.code == .tooManyLocks)
        }
        // Another channel, or the same name as a stream channel, has its own 32.
        try fixture.store.setLock(channel: "room", channelType: .stream, name: "lock0")
        try fixture.store.setLock(channel: "hall", channelType: .message, name: "lock0")
    }

    @Test func lockIdentifiersMustBeOneTo64Bytes() {
        let fixture = LockFixture()
        let long = String(repeating: "x", count: 65)
        for (channel, name) in [("", "mic"), (long, "mic"), ("room", ""), ("room", long)] {
            do {
                try fixture.store.setLock(channel: channel, channelType: .message, name: name)
                Issue.record("accepted \(channel)/\(name)")
            } catch {
                #expect(error.code == .identifierTooLong)
            }
        }
    }

    @Test func getLocksOfAChannelWithoutLocksIsEmpty() throws {
        #expect(try LockFixture().store.getLocks(channel: "nobody", channelType: .message).isEmpty)
    }

    // MARK: acquire and release

    @Test func acquiringAFreeLockMakesTheCallerItsHolder() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        try await fixture.acquire("alice")
        #expect(fixture.holder() == "alice")
        #expect(fixture.eventLog == ["set:mic:", "acquired:mic:alice"])
    }

    @Test func theHolderAcquiringAgainSucceedsWithoutAnEvent() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        try await fixture.acquire("alice")
        try await fixture.acquire("alice", session: "alice-other-device")
        #expect(fixture.eventLog == ["set:mic:", "acquired:mic:alice"])
    }

    @Test func acquiringAHeldLockWithoutRetryFailsAtOnceWithLockHeld() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        try await fixture.acquire("alice")
        let error = await storeError { try await fixture.acquire("bob") }
        #expect(error?.code == .lockHeld)
        #expect(error?.body.key == "mic")
        #expect(fixture.holder() == "alice")
    }

    @Test func acquiringAMissingLockFailsWithLockNotFound() async {
        let fixture = LockFixture()
        #expect(await storeError { try await fixture.acquire("alice") }?.code == .lockNotFound)
        #expect(await storeError { try await fixture.acquire("alice", retry: true) }?.code == .lockNotFound)
    }

    @Test func releasingFreesTheLock() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        try await fixture.acquire("alice")
        try fixture.release("alice")
        #expect(fixture.holder() == "")
        #expect(fixture.eventLog == ["set:mic:", "acquired:mic:alice", "released:mic:"])
    }

    @Test func onlyTheHolderCanRelease() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        #expect(await storeError { try fixture.release("alice") }?.code == .lockNotHeld)
        try await fixture.acquire("alice")
        #expect(await storeError { try fixture.release("bob") }?.code == .lockNotHeld)
        #expect(await storeError { try fixture.release("alice", "nope") }?.code == .lockNotFound)
        #expect(fixture.holder() == "alice")
    }

    // MARK: waiting in line

    @Test func waitersGetTheLockInArrivalOrder() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        try await fixture.acquire("alice")
        let bob = fixture.acquireInLine("bob")
        let carol = fixture.acquireInLine("carol")
        #expect(bob.count == 0 && carol.count == 0)

        try fixture.release("alice")
        #expect(succeeded(bob))
        #expect(carol.count == 0)
        #expect(fixture.holder() == "bob")

        try fixture.release("bob")
        #expect(succeeded(carol))
        #expect(fixture.holder() == "carol")
        #expect(
            fixture.eventLog == [
                "set:mic:", "acquired:mic:alice", "released:mic:", "acquired:mic:bob", "released:mic:",
                "acquired:mic:carol",
            ])
    }

    @Test func aUserWaitingFromTwoSessionsIsAnsweredTwiceWhenItGetsTheLock() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        try await fixture.acquire("alice")
        let bobPhone = fixture.acquireInLine("bob", session: "phone")
        let carol = fixture.acquireInLine("carol")
        let bobDesk = fixture.acquireInLine("bob", session: "desk")
        try fixture.release("alice")
        #expect(succeeded(bobPhone))
        #expect(succeeded(bobDesk))
        #expect(carol.count == 0)
    }

    @Test func removingALockCancelsItsWaiters() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        try await fixture.acquire("alice")
        let bob = fixture.acquireInLine("bob")
        try fixture.store.removeLock(channel: "room", channelType: .message, name: "mic")
        #expect(failedCode(bob) == .lockWaitCancelled)
        #expect(try fixture.store.getLocks(channel: "room", channelType: .message).isEmpty)
        #expect(fixture.eventLog.last == "removed:mic:")
        #expect(
            await storeError { try fixture.store.removeLock(channel: "room", channelType: .message, name: "mic") }?.code
                == .lockNotFound)
        // The name can be used again, and alice no longer holds anything.
        try fixture.setLock()
        try await fixture.acquire("bob")
    }

    @Test func cancelledWaitsLeaveTheLineAndAreAnswered() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        try await fixture.acquire("alice")
        let bob = fixture.acquireInLine("bob", session: "bob-1")
        let carol = fixture.acquireInLine("carol", session: "carol-1")
        fixture.store.cancelWaits(session: "bob-1")
        #expect(failedCode(bob) == .lockWaitCancelled)
        try fixture.release("alice")
        #expect(succeeded(carol))
        #expect(fixture.holder() == "carol")
    }

    // MARK: revoke

    @Test func revokeTakesTheLockFromTheNamedOwnerAndPassesItOn() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        try await fixture.acquire("alice")
        let bob = fixture.acquireInLine("bob")
        #expect(
            await storeError {
                try fixture.store.revokeLock(channel: "room", channelType: .message, name: "mic", owner: "carol")
            }?
            .code == .lockNotHeld)
        try fixture.store.revokeLock(channel: "room", channelType: .message, name: "mic", owner: "alice")
        #expect(succeeded(bob))
        #expect(fixture.holder() == "bob")
        #expect(fixture.eventLog.suffix(2) == ["released:mic:", "acquired:mic:bob"])
    }

    @Test func revokingAFreeOrMissingLockFails() throws {
        let fixture = LockFixture()
        try fixture.setLock()
        #expect(throws: SwitchboardStoreError.self) {
            try fixture.store.revokeLock(channel: "room", channelType: .message, name: "mic", owner: "")
        }
        do {
            try fixture.store.revokeLock(channel: "room", channelType: .message, name: "other", owner: "alice")
        } catch {
            #expect(error.code == .lockNotFound)
        }
    }

    // MARK: holders that go offline

    @Test func anOfflineHolderKeepsTheLockWithinItsTtl() async throws {
        let fixture = LockFixture()
        try fixture.setLock(ttl: 10)
        try await fixture.acquire("alice")
        fixture.store.userWentOffline("alice")
        fixture.clock.advance(byMs: 9_999)
        fixture.store.tick()
        #expect(fixture.holder() == "alice")
        #expect(fixture.eventLog.last == "acquired:mic:alice")
    }

    @Test func anOfflineHolderLosesTheLockWhenTheTtlRunsOutAndTheFirstWaiterGetsIt() async throws {
        let fixture = LockFixture()
        try fixture.setLock(ttl: 10)
        try await fixture.acquire("alice")
        let bob = fixture.acquireInLine("bob")
        fixture.store.userWentOffline("alice")
        fixture.clock.advance(byMs: 10_000)
        fixture.store.tick()
        #expect(fixture.holder() == "bob")
        #expect(succeeded(bob))
        #expect(fixture.eventLog.suffix(2) == ["expired:mic:", "acquired:mic:bob"])
        // Bob is online: time passing does nothing to his lock.
        fixture.clock.advance(byMs: 60_000)
        fixture.store.tick()
        #expect(fixture.holder() == "bob")
    }

    @Test func aHolderWhoComesBackWithinTheTtlKeepsTheLock() async throws {
        let fixture = LockFixture()
        try fixture.setLock(ttl: 10)
        try await fixture.acquire("alice")
        fixture.store.userWentOffline("alice")
        fixture.clock.advance(byMs: 5_000)
        fixture.store.userCameOnline("alice")
        fixture.clock.advance(byMs: 60_000)
        fixture.store.tick(now: fixture.clock.ms)
        #expect(fixture.holder() == "alice")
        // Going offline again starts a fresh countdown.
        fixture.store.userWentOffline("alice")
        fixture.clock.advance(byMs: 9_000)
        fixture.store.tick()
        #expect(fixture.holder() == "alice")
        fixture.clock.advance(byMs: 1_000)
        fixture.store.tick()
        #expect(fixture.holder() == "")
    }

    @Test func eachLockExpiresAfterItsOwnTtl() async throws {
        let fixture = LockFixture()
        try fixture.setLock("short", ttl: 10)
        try fixture.setLock("long", ttl: 60)
        try await fixture.acquire("alice", "short")
        try await fixture.acquire("alice", "long")
        fixture.store.userWentOffline("alice")
        fixture.clock.advance(byMs: 30_000)
        fixture.store.tick()
        #expect(fixture.holder("short") == "")
        #expect(fixture.holder("long") == "alice")
        fixture.clock.advance(byMs: 30_000)
        fixture.store.tick()
        #expect(fixture.holder("long") == "")
    }

    @Test func releasingWhileOfflineMarkedStopsTheCountdown() async throws {
        let fixture = LockFixture()
        try fixture.setLock(ttl: 10)
        try await fixture.acquire("alice")
        fixture.store.userWentOffline("alice")
        try fixture.store.revokeLock(channel: "room", channelType: .message, name: "mic", owner: "alice")
        try await fixture.acquire("bob")
        fixture.clock.advance(byMs: 20_000)
        fixture.store.tick()
        #expect(fixture.holder() == "bob")
    }

    // MARK: lock-guarded writes

    @Test func aGuardedWriteNeedsTheLockToExistAndBeHeldByTheCaller() async throws {
        let fixture = LockFixture()
        let room = MetadataScope.channel("room", type: .message)
        let missing = await storeError {
            try await fixture.store.apply(.set, room, [item("a", "1")], lock: "mic", caller: "alice")
        }
        #expect(missing?.code == .lockNotFound)
        #expect(missing?.body.key == "mic")
        try fixture.setLock()
        let notHeld = await storeError {
            try await fixture.store.apply(.set, room, [item("a", "1")], lock: "mic", caller: "alice")
        }
        #expect(notHeld?.code == .lockNotHeld)
        try await fixture.acquire("bob")
        let heldByOther = await storeError {
            try await fixture.store.apply(.set, room, [item("a", "1")], lock: "mic", caller: "alice")
        }
        #expect(heldByOther?.code == .lockNotHeld)
        #expect(fixture.store.read(room).majorRevision == 0)
        try await fixture.store.apply(.set, room, [item("a", "1")], lock: "mic", caller: "bob")
        #expect(pairs(fixture.store.read(room)) == ["a=1"])
    }

    @Test func theLockIsCheckedBeforeTheRevision() async throws {
        let fixture = LockFixture()
        let room = MetadataScope.channel("room", type: .message)
        try fixture.setLock()
        let error = await storeError {
            try await fixture.store.apply(.set, room, [item("a", "1")], majorRevision: 9, lock: "mic", caller: "alice")
        }
        #expect(error?.code == .lockNotHeld)
    }

    @Test func locksBelongToTheirChannelType() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        try await fixture.acquire("alice")
        let stream = MetadataScope.channel("room", type: .stream)
        let error = await storeError {
            try await fixture.store.apply(.set, stream, [item("a", "1")], lock: "mic", caller: "alice")
        }
        #expect(error?.code == .lockNotFound)
    }

    // MARK: snapshot

    @Test func aLockSnapshotListsEveryLockWithItsHolder() async throws {
        let fixture = LockFixture()
        try fixture.setLock("mic")
        try fixture.setLock("stage", ttl: 60)
        try await fixture.acquire("alice", "stage")
        let snapshot = try fixture.store.lockSnapshot(channel: "room", channelType: .message)
        #expect(snapshot.eventType == .snapshot)
        #expect(
            snapshot.locks == [
                LockDetail(lockName: "mic", owner: "", ttlSeconds: 10),
                LockDetail(lockName: "stage", owner: "alice", ttlSeconds: 60),
            ])
    }

    @Test func aCompletionMayCallBackIntoTheStore() async throws {
        let fixture = LockFixture()
        try fixture.setLock()
        try await fixture.acquire("alice")
        let store = fixture.store
        let nested = Recorder<Bool>()
        store.acquireLock(channel: "room", channelType: .message, name: "mic", userID: "bob", session: "b", retry: true)
        { _ in
            // Runs while the releasing thread delivers; the shard's lock is not held.
            let holder = try? store.getLocks(channel: "room", channelType: .message).first?.owner
            nested.append(holder == "bob")
            try? store.releaseLock(channel: "room", channelType: .message, name: "mic", userID: "bob")
        }
        try fixture.release("alice")
        #expect(nested.all == [true])
        #expect(fixture.holder() == "")
        #expect(fixture.eventLog.suffix(3) == ["released:mic:", "acquired:mic:bob", "released:mic:"])
    }
}
