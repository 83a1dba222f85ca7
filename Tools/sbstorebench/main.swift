import Foundation
import Logging
import SwitchboardStore
import SwitchboardWire

// Store start-up benchmark: writes USERS x ITEMS metadata items to a fresh SQLite file through the backend, then
// measures how long MetadataStore.load takes and how much memory the loaded store holds against its payload.
// Usage: swift run -c release sbstorebench [users] [items-per-user]
//        swift run -c release sbstorebench writes [count] [in-flight]   (the write path, see WriteBench.swift)

if CommandLine.arguments.count > 1, CommandLine.arguments[1] == "writes" {
    let count = CommandLine.arguments.count > 2 ? Int(CommandLine.arguments[2]) ?? 100_000 : 100_000
    let inFlight = CommandLine.arguments.count > 3 ? Int(CommandLine.arguments[3]) ?? 64 : 64
    try await runWriteBench(count: count, inFlight: inFlight)
    exit(0)
}

let users = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 100_000 : 100_000
let itemsPerUser = CommandLine.arguments.count > 2 ? Int(CommandLine.arguments[2]) ?? 10 : 10
let path = NSTemporaryDirectory() + "sbstorebench-\(getpid()).sqlite"
defer {
    for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
}

func residentBytes() -> Int64 {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return (Int64(line.split(separator: " ")[1]) ?? 0) * 1024
    }
    return 0
}

var payload = 0
do {
    let backend = try SQLiteBackend(path: path, synchronous: .normal)
    let writeStart = Date()
    var batch: [ChangeRecord] = []
    for user in 0..<users {
        let name = String(format: "user-%07d", user)
        var items: [ItemChange] = []
        for index in 0..<itemsPerUser {
            let key = "key\(index)"
            let value = "value-\(user)-\(index)"
            payload += key.utf8.count + value.utf8.count
            let item = MetadataItem(key: key, value: value, revision: 1, updateTs: 1_700_000_000_000, authorUserId: name)
            items.append(ItemChange(key: key, operation: .upsert(item, position: UInt64(index), keepsStoredPosition: false)))
        }
        items.sort { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        batch.append(ChangeRecord(scope: .user(name), majorRevision: 1, isRemoved: false, clearsItems: false, items: items))
        if batch.count == 5_000 {
            try backend.apply(batch)
            batch.removeAll(keepingCapacity: true)
        }
    }
    if !batch.isEmpty { try backend.apply(batch) }
    try backend.close()
    print("wrote \(users * itemsPerUser) items in \(String(format: "%.2f", Date().timeIntervalSince(writeStart))) s")
}

var logger = Logger(label: "sbstorebench")
logger.logLevel = .warning
let before = residentBytes()
let start = Date()
let store = try MetadataStore.load(from: try SQLiteBackend(path: path), logger: logger)
let seconds = Date().timeIntervalSince(start)
let after = residentBytes()
let items = users * itemsPerUser
print("loaded \(items) items (\(users) sets) in \(String(format: "%.2f", seconds)) s")
print("payload \(payload / 1_048_576) MiB; store memory (RSS growth) \((after - before) / 1_048_576) MiB")
print("memory per item: \((after - before) / Int64(items)) bytes; payload per item: \(payload / items) bytes")
print("limit (2 x payload + 100 B per item): \((2 * payload + 100 * items) / 1_048_576) MiB")
_ = try store.get(.user("user-0000000"))
await store.close()
