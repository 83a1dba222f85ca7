import Dispatch
import Foundation
import Logging
import SwitchboardStore
import SwitchboardWire

// The write path of every SQLite file the gateway keeps (`sbstorebench writes [count] [in-flight]`): `count` writes
// with at most `in-flight` of them waiting for their answer at a time, each file in a fresh temporary directory with
// its production settings (WAL, synchronous=FULL). Prints writes/s and the process's CPU time per write.

/// User + system CPU time of the process, in µs.
private func cpuMicroseconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6
        + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec)
}

/// Runs `count` writes, `inFlight` at a time; `write(index, done)` starts write `index` and calls `done` when
/// answered.
private func measure(
    _ label: String, count: Int, inFlight: Int, _ write: (Int, @escaping @Sendable () -> Void) -> Void
) {
    let slots = DispatchSemaphore(value: inFlight)
    let finished = DispatchGroup()
    let cpuStart = cpuMicroseconds()
    let start = DispatchTime.now().uptimeNanoseconds
    for index in 0..<count {
        slots.wait()
        finished.enter()
        write(index) {
            slots.signal()
            finished.leave()
        }
    }
    finished.wait()
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    let cpu = cpuMicroseconds() - cpuStart
    print(
        "\(label): \(Int(Double(count) / seconds)) writes/s, \(String(format: "%.2f", cpu / Double(count))) µs CPU per write")
}

func runWriteBench(count: Int, inFlight: Int) async throws {
    var logger = Logger(label: "sbstorebench")
    logger.logLevel = .warning
    let directory = NSTemporaryDirectory() + "sbstorebench-writes-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }

    for durability in [Durability.acknowledgeAfterCommit, .acknowledgeBeforeCommit] {
        let path = directory + "/metadata-\(durability == .acknowledgeAfterCommit ? "commit" : "apply").sqlite"
        let store = try MetadataStore.load(
            from: SQLiteBackend(path: path), configuration: StoreConfiguration(durability: durability), logger: logger)
        measure(
            "metadata set, \(durability == .acknowledgeAfterCommit ? "answered after commit" : "answered at once")",
            count: count, inFlight: inFlight
        ) { index, done in
            let request = MetadataWriteRequest(
                .set, scope: .user("user-\(index % 10_000)"), items: [MetadataItem(key: "k", value: "v\(index)")])
            store.write(request, caller: "bench", nowMs: 1) { _ in done() }
        }
        _ = await store.flush()
        await store.close()
    }

    let events = try EventStore(path: directory + "/events.sqlite")
    measure("event subscriptions", count: count, inFlight: inFlight) { index, done in
        let subscription = StoredEventSubscription(
            subscriber: "user-\(index % 10_000)", publisher: "p\(index % 7)", subscribedAtMs: 1, expiresAtMs: .max)
        events.upsert([subscription]) { _ in done() }
    }
    events.flush()

    let profiles = try ProfileStore(path: directory + "/profiles.sqlite")
    measure("profile records", count: count, inFlight: inFlight) { index, done in
        profiles.upsert(UserInfo(userId: "user-\(index % 10_000)", name: "n\(index)")) { _ in done() }
    }
    profiles.flush()

    let moderation = try ModerationStore(path: directory + "/moderation.sqlite")
    measure("moderation bans", count: count, inFlight: inFlight) { index, done in
        Task {
            try? await moderation.record(.kick(user: "user-\(index % 10_000)", reason: "", bannedUntilMs: .max))
            done()
        }
    }
}
