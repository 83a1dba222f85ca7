import SwitchboardStore
import SwitchboardWire

/// The answer a metadata write gets.
typealias WriteAnswer = Result<WriteOutcome, SwitchboardStoreError>

/// A store over `backend` that commits in the background (a 10 ms storage probe).
func backedStore(
    _ backend: RecordingBackend, durability: Durability = .acknowledgeAfterCommit, shards: Int = 16
) throws -> MetadataStore {
    try MetadataStore.load(
        from: backend,
        configuration: StoreConfiguration(shardCount: shards, durability: durability, probeIntervalMs: 10),
        logger: silentLogger)
}

/// Starts a write by `alice` and returns where its answer lands.
func startWrite(
    _ store: MetadataStore, _ operation: MetadataOperation, _ scope: MetadataScope, _ items: [MetadataItem],
    majorRevision: Int64 = -1
) -> Recorder<WriteAnswer> {
    let answers = Recorder<WriteAnswer>()
    store.write(
        MetadataWriteRequest(operation, scope: scope, items: items, majorRevision: majorRevision), caller: "alice",
        nowMs: 1
    ) { answers.append($0) }
    return answers
}

/// The error of the first answer, if it was one.
func firstError(_ answers: Recorder<WriteAnswer>) -> SwitchboardStoreError? {
    guard let first = answers.all.first, case .failure(let error) = first else { return nil }
    return error
}
