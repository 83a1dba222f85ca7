import SwitchboardStore
import SwitchboardWire
import Testing

@Suite("Store service")
struct MetadataStoreServiceTests {
    @Test func theServiceExpiresLocksWhileRunningAndClosesTheStoreWhenStopped() async throws {
        let clock = ManualClock()
        let backend = RecordingBackend()
        let store = try MetadataStore.load(
            from: backend,
            configuration: StoreConfiguration(durability: .acknowledgeBeforeCommit, clock: clock.storeClock),
            logger: silentLogger)
        try store.setLock(channel: "room", channelType: .message, name: "mic", ttlSeconds: 10)
        try await store.acquireLock(
            channel: "room", channelType: .message, name: "mic", userID: "alice", session: "s", retry: false)
        store.userWentOffline("alice")

        let service = MetadataStoreService(store: store, tickInterval: .milliseconds(5))
        let running = Task { try await service.run() }
        clock.advance(byMs: 10_000)
        // Generous: other suites run in parallel on two cores and may hold the cooperative threads for a while.
        let expired = await eventually(timeoutMs: 60_000) {
            (try? store.getLocks(channel: "room", channelType: .message).first?.owner) == ""
        }
        #expect(expired)

        try await store.apply(.set, .user("alice"), [item("a", "1")])
        running.cancel()
        try await running.value
        #expect(backend.commits.flatMap { $0 }.map(\.scope) == [.user("alice")])
        #expect(
            await storeError { try await store.apply(.set, .user("alice"), [item("b", "1")]) }?.code == .shuttingDown)
    }
}
