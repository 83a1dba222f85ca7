import Logging
import NIOCore
import PostgresNIO
import SwitchboardStore
import SwitchboardWire

/// Profile rows: applies another node's directory changes to this node's copy and tells this node's subscribers
/// (unless this node's own write of the record is newer, ``PostgresProfileBackend/accepts(_:version:)``), keeps track
/// of which node provides each kind, asks this node's provider what another node forwarded here, and answers this
/// node's reads whose asks another node answered.
struct ProfileFeedConsumer: ChangeFeedConsumer {
    let backend: PostgresProfileBackend
    let directory: any ReplicatedProfileDirectory
    /// How long an ask forwarded here waits for this node's provider.
    let providerTimeout: Duration

    func consume(_ payload: ByteBuffer, on connection: PostgresConnection, logger: Logger) async throws {
        let (version, message) = try ProfileFeedCoding.decode(payload)
        let backend = self.backend
        switch message {
        case .change(let change):
            backend.read(version: version)
            self.directory.applyReplicated(change) { backend.accepts($0, version: version) }
        case .providers(node: let node, kinds: let kinds, present: true):
            backend.read(version: version)
            self.directory.applyReplicated(.providers(kinds, present: true)) { key in
                guard backend.accepts(key, version: version) else { return false }
                if case .provider(let kind) = key { backend.setRemoteProvider(kind, node: node) }
                return true
            }
        case .providers(node: let node, kinds: let kinds, present: false):
            Self.providersGone(kinds, of: node, backend: backend, directory: self.directory)
        case .request(let to, let from, let request):
            guard to == backend.nodeID else { return }
            if let asked = self.directory.askForwarded(request, from: from, askID: request.providerRequestId) {
                let directory = self.directory
                let timeout = self.providerTimeout
                Task {
                    try? await Task.sleep(for: timeout)
                    directory.dropForwardedAsk(asked)
                }
            } else {
                // No provider here any more: nothing found, so the asking node answers at once.
                backend.answered(askID: request.providerRequestId, node: from)
            }
        case .answered(let to, let askID):
            guard to == backend.nodeID else { return }
            self.directory.answerForwarded(askID: askID)
        }
    }

    /// `node`'s provider of `kinds` went away (its session ended, or the node died): reads no longer wait for it.
    static func providersGone(
        _ kinds: [ProfileKind], of node: String, backend: PostgresProfileBackend,
        directory: any ReplicatedProfileDirectory
    ) {
        let gone = backend.removeRemoteProviders(kinds, node: node)
        guard !gone.isEmpty else { return }
        directory.applyReplicated(.providers(gone, present: false)) { _ in true }
    }
}

/// Removes the provider registrations of dead nodes, tells the other nodes through the feed, and this node once the
/// sweep committed.
struct ProfileProviderSweeper: DeadNodeSweeper {
    let backend: PostgresProfileBackend
    let directory: any ReplicatedProfileDirectory

    func sweep(deadNodes: [String], on connection: PostgresConnection, logger: Logger) async throws
        -> @Sendable () -> Void
    {
        let rows = try await connection.query(
            "DELETE FROM sb_profile_provider WHERE node = ANY(\(deadNodes)::text[]) RETURNING kind, node", logger: logger)
        var gone: [String: [ProfileKind]] = [:]
        for try await (kind, node) in rows.decode((Int16, String).self) {
            gone[node, default: []].append(ProfileKind(rawValue: UInt32(UInt16(bitPattern: kind))))
        }
        // Nodes that registered no provider of their own may still be known here as providers (a row this node has
        // not read yet): forget them too.
        for node in deadNodes where gone[node] == nil { gone[node] = [] }
        let messages = gone.filter { !$0.value.isEmpty }.map {
            ChangeFeedRows.Row(
                kind: .profile,
                payload: ProfileFeedCoding.encode(.providers(node: $0.key, kinds: $0.value, present: false), version: 0))
        }
        try await ChangeFeedRows.append(messages, node: self.backend.nodeID, on: connection, logger: logger)
        let backend = self.backend
        let directory = self.directory
        let swept = gone
        return {
            for (node, _) in swept {
                ProfileFeedConsumer.providersGone(ProfileKind.allKnown, of: node, backend: backend, directory: directory)
            }
        }
    }
}
