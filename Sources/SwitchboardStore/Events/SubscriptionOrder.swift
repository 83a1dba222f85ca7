/// In a cluster, which change of each event subscription (subscriber, publisher) is the latest, so that every node
/// ends with the subscription as last committed.
///
/// A node applies its own subscribes and unsubscribes at once, before they commit, and the other nodes' changes when
/// its feed reader gets to them; so another node's change can arrive after a change of this node that committed later
/// (or has not committed yet). Every change carries the version it committed at
/// (``SharedEventChange/subscribed(_:version:)``): versions follow the commit order of every node's changes. Another
/// node's change of a subscription is
///
/// - held back (``admit(_:_:version:)`` is false) while this node has a change of it pending: this node's change
///   commits later, so it is newer; when that change ends (``end(_:all:committedAt:)``), the latest change held back
///   is applied after all if it committed later than this node's (the commit and the feed reader race), or if this
///   node's change failed (it was undone to what the node held before);
/// - skipped when this node's own committed change of it is newer (its version is greater).
///
/// An unsubscribe from every publisher counts as a change of each of the subscriber's subscriptions, those the node
/// does not know of yet included.
struct SubscriptionOrder {
    struct Key: Hashable {
        var subscriber: String
        var publisher: String
    }

    /// A subscription as a change leaves it (nil where the change removes it).
    struct Term: Sendable {
        var subscribedAtMs: Int64
        var expiresAtMs: Int64
    }

    /// This node's changes not committed yet, per subscription.
    private var pending: [Key: Int] = [:]
    /// This node's unsubscribes from every publisher not committed yet, per subscriber.
    private var pendingAll: [String: Int] = [:]
    /// The version of this node's latest committed change, per subscription.
    private var committed: [Key: Int64] = [:]
    /// The version of this node's latest committed unsubscribe from every publisher, per subscriber.
    private var committedAll: [String: Int64] = [:]
    /// Other nodes' latest changes held back while a change of this node was pending.
    private var deferred: [Key: (term: Term?, version: Int64)] = [:]
    /// The greatest version read from another node: every later one is at least as great.
    private var newestRead = Int64.min
    /// How many committed versions may be kept before the old ones are dropped.
    private var forgetAt = 1_024

    /// This node makes a change of `keys` (and, with `all`, of every subscription of that subscriber).
    mutating func begin(_ keys: [Key], all subscriber: String? = nil) {
        for key in keys { self.pending[key, default: 0] += 1 }
        if let subscriber { self.pendingAll[subscriber, default: 0] += 1 }
    }

    /// The publishers of `subscriber` this node has a change of pending.
    func pendingPublishers(of subscriber: String) -> [String] {
        self.pending.keys.filter { $0.subscriber == subscriber }.map(\.publisher)
    }

    /// Whether another node's change of `key` to `term` at `version` is to be applied now (false: held back, or
    /// older than this node's own).
    mutating func admit(_ key: Key, _ term: Term?, version: Int64) -> Bool {
        self.newestRead = max(self.newestRead, version)
        if self.pending[key] != nil || self.pendingAll[key.subscriber] != nil {
            // Of one commit, the later change wins (equal versions).
            if version >= self.deferred[key]?.version ?? Int64.min { self.deferred[key] = (term, version) }
            return false
        }
        guard self.ownVersion(of: key) <= version else { return false }
        if self.committed.count + self.committedAll.count > self.forgetAt { self.forgetOlderThanRead() }
        return true
    }

    /// This node's change of `keys` (with `all`, from every publisher of that subscriber) committed at `version`, or
    /// failed (nil). - Returns: The changes held back meanwhile that are to be applied now.
    mutating func end(_ keys: [Key], all subscriber: String? = nil, committedAt version: Int64?) -> [(Key, Term?)] {
        for key in keys {
            if let count = self.pending[key], count > 1 { self.pending[key] = count - 1 } else { self.pending[key] = nil }
            if let version { self.committed[key] = max(self.committed[key] ?? Int64.min, version) }
        }
        var touched = keys
        if let subscriber {
            if let count = self.pendingAll[subscriber], count > 1 {
                self.pendingAll[subscriber] = count - 1
            } else {
                self.pendingAll[subscriber] = nil
            }
            if let version { self.committedAll[subscriber] = max(self.committedAll[subscriber] ?? Int64.min, version) }
            touched += self.deferred.keys.filter { $0.subscriber == subscriber }
        }
        guard !self.deferred.isEmpty else { return [] }
        var due: [(Key, Term?)] = []
        for key in touched where self.pending[key] == nil && self.pendingAll[key.subscriber] == nil {
            guard let held = self.deferred.removeValue(forKey: key) else { continue }
            // Newer than what this node committed of it; after a failure, newer than what the node held before.
            if held.version > self.ownVersion(of: key) { due.append((key, held.term)) }
        }
        return due
    }

    /// The version of this node's latest committed change of `key`.
    private func ownVersion(of key: Key) -> Int64 {
        max(self.committed[key] ?? Int64.min, self.committedAll[key.subscriber] ?? Int64.min)
    }

    /// Drops the versions of this node's changes older than a change read from another node: every change still to
    /// be read is newer than them.
    private mutating func forgetOlderThanRead() {
        let newest = self.newestRead
        self.committed = self.committed.filter { $0.value >= newest }
        self.committedAll = self.committedAll.filter { $0.value >= newest }
        self.forgetAt = max(1_024, 2 * (self.committed.count + self.committedAll.count))
    }
}
