#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import Histogram
import Logging
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// The `expiry-inprocess` scenario: `--ttl-items` items with a TTL whose deadlines fall within `--ttl-spread-ms`,
/// and how late each one's `expired` change reaches the store's expiry handler (where the gateway's storage area
/// publishes the `expired` storage event), in this process (`Protocol/SPEC.md` SB-13.1-9).
///
/// The store is the gateway's: a SQLite metadata file in a temporary directory, acknowledge-after-commit, where an
/// expiry is announced at once and committed behind (SB-13.1-9); `writeback_lag_max_ms` is the oldest uncommitted
/// change's age, sampled every 20 ms, and `flush_after_last_ms` how long the last commits took after the last
/// announcement. The items go into sets of `--ttl-items-per-set` user sets
/// (a set holds at most 16 KiB), written with `setUserMetadata`'s store call; their deadlines are spread evenly over
/// the window, which starts `--ttl-lead-ms` after the writes begin (all writes are done before it), interleaved
/// across the sets so that every sweep touches many of them. The sweep runs every 10 ms, as ``MetadataStoreService``
/// runs it. An item's delay is the wall-clock time its key was reported minus its `expiresAtMs`; the run is broken
/// when an item is reported before its deadline, twice, or not within 10 s after the window.
///
/// Not included: encoding the event and writing it to the subscribers' sockets (see `storage-fanout` for that
/// part of a storage event's path).
struct ExpiryInProcessBench {
    var items: Int
    var itemsPerSet: Int
    var spreadMs: UInt64
    var leadMs: UInt64
    /// A memory-only store instead of the SQLite file: the sweep alone, without the commit an expiry waits for.
    var memoryOnly: Bool

    private struct Heard: Sendable {
        var set: String
        var keys: [String]
        var atNs: UInt64
    }

    private static func wallNs() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
    }

    func run(report: inout BenchReport) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sbbench-expiry-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let logger = Logger(label: "sbbench.expiry", factory: { _ in SwiftLogNoOpLogHandler() })
        let store =
            self.memoryOnly
            ? MetadataStore(logger: logger)
            : try MetadataStore.load(
                from: SQLiteBackend(path: directory.appendingPathComponent("metadata.sqlite").path), logger: logger)
        let heard = Mutex<[Heard]>([])
        store.setExpiryHandler { outcome in
            let at = Self.wallNs()
            heard.withLock { $0.append(Heard(set: outcome.scope.name, keys: outcome.items.map(\.key), atNs: at)) }
        }
        let sweeper = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(10))
                store.expireDueItems()
            }
        }
        defer { sweeper.cancel() }

        let sets = max(1, (self.items + self.itemsPerSet - 1) / self.itemsPerSet)
        let startMs = Self.wallNs() / 1_000_000
        let windowStartMs = startMs + self.leadMs
        var deadlines: [String: UInt64] = [:]
        deadlines.reserveCapacity(self.items)
        let writeStart = ContinuousClock.now
        for set in 0..<sets {
            let user = "ttl-\(set)"
            var items: [MetadataItem] = []
            for slot in 0..<self.itemsPerSet {
                let index = set * self.itemsPerSet + slot
                guard index < self.items else { break }
                // Item index i of set s gets the (s + i * sets)-th of `items` evenly spaced deadlines.
                let rank = UInt64(slot * sets + set)
                let deadline = windowStartMs + rank * self.spreadMs / UInt64(self.items)
                let nowMs = Self.wallNs() / 1_000_000
                guard deadline > nowMs + 100 else { throw BenchFailure("writing took longer than --ttl-lead-ms") }
                items.append(MetadataItem(key: "k\(slot)", value: "v", ttlMs: deadline - nowMs))
            }
            let outcome = try await store.write(
                MetadataWriteRequest(.set, scope: .user(user), items: items), caller: user,
                nowMs: Self.wallNs() / 1_000_000)
            for item in outcome.items { deadlines["\(user)/\(item.key)"] = item.expiresAtMs }
        }
        let writeSeconds = (ContinuousClock.now - writeStart).seconds
        let windowEndMs = deadlines.values.max() ?? windowStartMs
        let giveUpNs = (windowEndMs + 10_000) * 1_000_000
        // How far the commits trail the announcements: the write-back's oldest uncommitted change, sampled.
        var lagMaxMs: UInt64 = 0
        while heard.withLock({ $0.reduce(0) { $0 + $1.keys.count } }) < deadlines.count, Self.wallNs() < giveUpNs {
            try await Task.sleep(for: .milliseconds(20))
            lagMaxMs = max(lagMaxMs, store.writeBackStatus?.oldestUncommittedAgeMs ?? 0)
        }
        let lastHeardNs = Self.wallNs()
        let flushed = await store.flush()
        let flushMs = Double(Self.wallNs() - lastHeardNs) / 1e6
        sweeper.cancel()
        await store.close()

        var delays = Histogram<UInt64>(highestTrackableValue: 600_000_000_000, numberOfSignificantValueDigits: .three)
        var seen = Set<String>()
        var early = 0
        var twice = 0
        var events = 0
        for report in heard.withLock({ $0 }) {
            events += 1
            for key in report.keys {
                let name = "\(report.set)/\(key)"
                guard let deadline = deadlines[name] else { continue }
                if !seen.insert(name).inserted { twice += 1 }
                let deadlineNs = deadline * 1_000_000
                if report.atNs < deadlineNs {
                    early += 1
                } else {
                    delays.record(report.atNs - deadlineNs)
                }
            }
        }
        report.add("items", deadlines.count)
        report.add("sets", sets)
        report.add("window_ms", Int(windowEndMs - (deadlines.values.min() ?? windowStartMs)))
        report.add("write_seconds", writeSeconds, decimals: 2)
        report.add("expired_events", events)
        report.add("expired_items", seen.count)
        report.addPercentiles("delay", delays)
        if !self.memoryOnly {
            report.add("writeback_lag_max_ms", Int(lagMaxMs))
            report.add("flush_after_last_ms", flushMs, decimals: 1)
        }
        if !flushed { report.fail("the store's commits failed") }
        if seen.count != deadlines.count { report.fail("\(deadlines.count - seen.count) items were never reported expired") }
        if early > 0 { report.fail("\(early) items were reported before their deadline") }
        if twice > 0 { report.fail("\(twice) items were reported twice") }
    }
}

extension SBBench {
    func runExpiryInProcess(report: inout BenchReport) async throws {
        let bench = ExpiryInProcessBench(
            items: self.ttlItems, itemsPerSet: self.ttlItemsPerSet, spreadMs: self.ttlSpreadMs, leadMs: self.ttlLeadMs,
            memoryOnly: self.ttlMemory)
        try await bench.run(report: &report)
    }
}
