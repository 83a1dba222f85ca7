import SwitchboardWire

/// Makes a ledger's subscriptions again on a new connection.
enum SubscriptionRestorer {
    /// Restoring requests on the wire at once.
    static let concurrency = 8
    /// Tries per subscription when the server says to slow down (`3000 rateLimited`, `3001 tooManyInflight`).
    static let triesWhenLimited = 5

    /// Sends every subscription's request (`requests`, in the same order; by default each one's
    /// ``RestorableSubscription/request``) on `connection`, a few at a time, and reports each one's outcome in
    /// the order given. A failure is the server's refusal, or (when the connection went away meanwhile) the
    /// lost connection.
    static func restore(
        _ subscriptions: [RestorableSubscription], requests: [Request]? = nil, on connection: SwitchboardConnection,
        timeout: Duration
    ) async -> RestoreReport {
        let requests = requests ?? subscriptions.map(\.request)
        var results = [Result<Response, SwitchboardClientError>?](repeating: nil, count: subscriptions.count)
        await withTaskGroup(of: (Int, Result<Response, SwitchboardClientError>).self) { group in
            var next = 0
            func startNext() {
                guard next < subscriptions.count else { return }
                let index = next
                next += 1
                group.addTask { (index, await self.make(requests[index], on: connection, timeout: timeout)) }
            }
            for _ in 0..<self.concurrency { startNext() }
            for await (index, result) in group {
                results[index] = result
                startNext()
            }
        }
        var report = RestoreReport()
        for (subscription, result) in zip(subscriptions, results) {
            switch result {
            case .success(let response)?:
                report.restored.append(subscription)
                if case .subscribeChanges(let answer) = response { report.changeStream = answer }
            case .failure(let error)?:
                report.failed.append(RestoreReport.Failure(subscription: subscription, error: error))
            case nil:
                break  // every task reports before the group ends
            }
        }
        return report
    }

    /// Makes one subscription, waiting and trying again while the server says to slow down.
    private static func make(
        _ request: Request, on connection: SwitchboardConnection, timeout: Duration
    ) async -> Result<Response, SwitchboardClientError> {
        var attempt = 1
        while true {
            do {
                return .success(try await connection.send(request, timeout: timeout))
            } catch {
                let error = SwitchboardClientError(wrapping: error)
                let slowDown = error.kind == .server && (error.code == .rateLimited || error.code == .tooManyInflight)
                guard slowDown, attempt < self.triesWhenLimited else { return .failure(error) }
                try? await Task.sleep(for: error.retryAfter ?? .milliseconds(100 * attempt))
                attempt += 1
            }
        }
    }
}
