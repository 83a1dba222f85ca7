import SwitchboardWire

extension MetadataWriteRequest {
    /// Checks the request's arguments alone, before any state is read (`Protocol/SPEC.md` SB-13.1-3: argument
    /// limits `7001`–`7006` and `7017` (an item's `ttlMs`, then the
    /// write's `setTtlMs`), then `7000`).
    ///
    /// - Returns: The first rule the request breaks, or nil.
    public func validationError(limits: StoreLimits) -> SwitchboardStoreError? {
        guard limits.isValidIdentifier(self.scope.name) else {
            let what = self.scope.isChannel ? "channel name" : "user id"
            return SwitchboardStoreError(.identifierTooLong, "\(what) must be 1-\(limits.maxIdentifierBytes) bytes")
        }
        if !self.lock.isEmpty, self.lock.utf8.count > limits.maxIdentifierBytes {
            return SwitchboardStoreError(.identifierTooLong, "lock name must be 1-\(limits.maxIdentifierBytes) bytes")
        }
        if self.majorRevision < -1 {
            return SwitchboardStoreError(.invalidRevision, "majorRevision must be -1 or more")
        }
        let checksValues = self.operation != .remove
        for item in self.items {
            let keyBytes = item.key.utf8.count
            if keyBytes == 0 || keyBytes > limits.maxKeyBytes {
                return SwitchboardStoreError(
                    .keyTooLong, "keys must be 1-\(limits.maxKeyBytes) bytes", key: Self.clipped(item.key, limits))
            }
            if checksValues, item.value.utf8.count > limits.maxValueBytes {
                return SwitchboardStoreError(
                    .itemTooLarge, "values must be at most \(limits.maxValueBytes) bytes", key: item.key)
            }
            if item.revision < -1 {
                return SwitchboardStoreError(.invalidRevision, "revision must be -1 or more", key: item.key)
            }
            if checksValues, item.ttlMs != 0, !limits.itemTtlMs.contains(item.ttlMs) {
                return SwitchboardStoreError(
                    .invalidTtl,
                    "ttlMs must be 0 or \(limits.itemTtlMs.lowerBound)-\(limits.itemTtlMs.upperBound)", key: item.key)
            }
        }
        if checksValues, self.setTtlMs != 0, self.setTtlMs != -1,
            self.setTtlMs < 0 || !limits.itemTtlMs.contains(UInt64(self.setTtlMs))
        {
            return SwitchboardStoreError(
                .invalidTtl,
                "setTtlMs must be -1, 0 or \(limits.itemTtlMs.lowerBound)-\(limits.itemTtlMs.upperBound)")
        }
        if let duplicate = self.firstDuplicateKey() {
            return SwitchboardStoreError(.duplicateKey, "the same key twice in one call", key: duplicate)
        }
        if self.items.isEmpty, self.operation != .remove {
            return SwitchboardStoreError(.invalidArgument, "at least one item is required")
        }
        if self.scope.isChannel, self.scope.channelType != .message, self.scope.channelType != .stream {
            return SwitchboardStoreError(.invalidArgument, "unknown channel type \(self.scope.channelType.rawValue)")
        }
        return nil
    }

    /// The first key that appears a second time (byte-wise), if any.
    private func firstDuplicateKey() -> String? {
        let items = self.items
        if items.count <= MetadataSet.indexThreshold {
            // Small calls: pairwise comparison, no allocation.
            for later in items.indices.dropFirst() {
                for earlier in 0..<later where items[earlier].key.hasSameUTF8(as: items[later].key) {
                    return items[later].key
                }
            }
            return nil
        }
        var seen = Set<UTF8Key>(minimumCapacity: items.count)
        for item in items where !seen.insert(UTF8Key(item.key)).inserted {
            return item.key
        }
        return nil
    }

    /// A key short enough to echo back in an error.
    private static func clipped(_ key: String, _ limits: StoreLimits) -> String {
        key.utf8.count <= limits.maxKeyBytes ? key : ""
    }
}
