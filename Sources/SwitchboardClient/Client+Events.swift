import SwitchboardWire

/// Event subscription and online state (`Protocol/SPEC.md` §13.4). Events arrive on
/// ``SwitchboardClient/subscribedEvents``. Subscriptions belong to the user and outlive sessions, so a reconnect
/// has nothing to restore here; it asks the server for the online-only events missed meanwhile instead
/// (`resumeEvents`, SB-13.4-9), and reports the answer in ``RestoreReport/events``.
extension SwitchboardClient {
    /// Subscribes to the events of up to 100 publishers for `expirySeconds` (60 s to 30 days); subscribing again
    /// renews the expiry.
    ///
    /// - Parameter syncEnabled: also get each publisher's current events (online state included) at once.
    /// - Returns: the publishers that could not be subscribed (invalid ids) in `failedPublishers`.
    @discardableResult
    public func subscribeEvent(
        publishers: [String], expirySeconds: UInt64, syncEnabled: Bool = false, eventType: UInt64 = 1
    ) async throws(SwitchboardClientError) -> SubscribeEventResponse {
        let request = SubscribeEventRequest(
            eventType: eventType, expirySeconds: expirySeconds, syncEnabled: syncEnabled, publishers: publishers)
        return try await self.call(.subscribeEvent(request)) {
            guard case .subscribeEvent(let response) = $0 else { return nil }
            return response
        }
    }

    /// Ends subscriptions to the named publishers; with none, every subscription of that event type.
    public func unsubscribeEvent(publishers: [String] = [], eventType: UInt64 = 1) async throws(SwitchboardClientError) {
        _ = try await self.send(.unsubscribeEvent(UnsubscribeEventRequest(eventType: eventType, publishers: publishers)))
    }

    /// Publishes an event to the caller's subscribers.
    ///
    /// - Parameters:
    ///   - value: 10000 and up (lower values are the server's).
    ///   - expirySeconds: 60 s to 7 days.
    ///   - onlineOnly: false: also keep it until it expires and deliver it to subscribers when they log in.
    ///   - multiDeviceSync: also deliver it to the caller's own other sessions.
    ///   - ext: free text, at most 4096 bytes.
    /// - Returns: the server-assigned event id and timestamp.
    @discardableResult
    public func publishEvent(
        value: UInt64, expirySeconds: UInt64 = 604_800, onlineOnly: Bool = true, multiDeviceSync: Bool = true,
        ext: String = "", eventType: UInt64 = 1
    ) async throws(SwitchboardClientError) -> PublishEventResponse {
        let request = PublishEventRequest(
            eventType: eventType, value: value, expirySeconds: expirySeconds, onlineOnly: onlineOnly,
            multiDeviceSync: multiDeviceSync, ext: ext)
        return try await self.call(.publishEvent(request)) {
            guard case .publishEvent(let response) = $0 else { return nil }
            return response
        }
    }

    /// Asks the server for the online-only events it numbered after `position` of `epoch` that the user may receive
    /// (they follow the answer on ``SwitchboardClient/subscribedEvents``); the client does this by itself after a
    /// reconnect. With `gap` some may be missing.
    @discardableResult
    public func resumeEvents(epoch: UInt64, after position: UInt64) async throws(SwitchboardClientError)
        -> ResumeEventsResponse
    {
        try await self.call(.resumeEvents(ResumeEventsRequest(epoch: epoch, after: position))) {
            guard case .resumeEvents(let response) = $0 else { return nil }
            return response
        }
    }

    /// Where the client stands in the server's numbering of online-only events: the epoch and the greatest position
    /// received (from the events and the `subscribeEvent` answers; nil: none yet). A reconnect resumes from it.
    public var eventReplayPosition: (epoch: UInt64, position: UInt64)? {
        self.withCore { core in core.ledger.eventReplay.map { ($0.epoch, $0.position) } }
    }

    /// The caller's subscriptions to the named publishers (1-100), with their expiry.
    public func queryEventSubscriptions(
        publishers: [String], eventType: UInt64 = 1
    ) async throws(SwitchboardClientError) -> QueryEventSubscriptionsResponse {
        let request = QueryEventSubscriptionsRequest(eventType: eventType, publishers: publishers)
        return try await self.call(.queryEventSubscriptions(request)) {
            guard case .queryEventSubscriptions(let response) = $0 else { return nil }
            return response
        }
    }
}
