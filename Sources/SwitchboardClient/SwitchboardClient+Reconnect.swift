import Logging
import SwitchboardWire

extension SwitchboardClient {
    /// Watches the current connection; when it is lost, reconnects and restores, or closes the client when the
    /// loss is final. Runs from the first successful ``connect()`` until the client closes.
    func supervise(_ first: SwitchboardConnection, forwarder firstForwarder: Task<Void, Never>) async {
        var connection = first
        var forwarder = firstForwarder
        while true {
            await connection.waitUntilClosed()
            await forwarder.value  // every push of the old connection is delivered before anything else happens
            let cause = await connection.closeReason
                ?? SwitchboardClientError(code: .unavailable, message: "the connection closed", kind: .connectionLost)
            let goAway = await connection.goAway
            enum Next { case stop, giveUp, reconnect }
            let next: Next = self.withCore { core in
                switch core.phase {
                case .closing, .closed: return .stop  // the app's logout or close
                default: break
                }
                if Self.isFatal(cause, duringSession: true, canRenewToken: self.hasTokenProvider)
                    || self.reconnectPolicy.maxAttempts == 0
                {
                    return .giveUp
                }
                core.phase = .reconnecting(attempt: 0)
                return .reconnect
            }
            switch next {
            case .stop:
                return
            case .giveUp:
                self.finish(error: cause, goAway: goAway, requestedByApp: false)
                return
            case .reconnect:
                self.logger.warning("connection lost; reconnecting", metadata: ["switchboard.error": "\(cause)"])
                self.report(.disconnected(Disconnection(error: cause, goAway: goAway, willReconnect: true)))
            }
            guard let (nextConnection, nextForwarder) = await self.reconnect(after: cause) else { return }
            connection = nextConnection
            forwarder = nextForwarder
        }
    }

    /// Reconnects with backoff until a new session is up with its subscriptions restored (returned, with the
    /// task forwarding its pushes), the client gives up (it is then closed), or the app closes it (nil).
    private func reconnect(after cause: SwitchboardClientError) async -> (SwitchboardConnection, Task<Void, Never>)? {
        var lastError = cause
        var attempt = 0
        while true {
            attempt += 1
            if let maxAttempts = self.reconnectPolicy.maxAttempts, attempt > maxAttempts {
                let error = SwitchboardClientError(
                    code: lastError.code,
                    message: "gave up after \(maxAttempts) reconnect attempts; the last failed with \(lastError)",
                    kind: lastError.kind)
                self.finish(error: error, goAway: nil, requestedByApp: false)
                return nil
            }
            let delay = self.reconnectPolicy.delay(forAttempt: attempt)
            guard self.markReconnecting(attempt: attempt) else { return nil }
            self.logger.info(
                "reconnecting",
                metadata: [
                    "switchboard.attempt": "\(attempt)", "switchboard.delay": "\(delay)",
                    "switchboard.cause": "\(lastError)",
                ])
            self.report(.reconnecting(attempt: attempt, delay: delay, cause: lastError))
            do {
                try await Task.sleep(for: delay)
            } catch {
                return nil  // cancelled: the app closed the client
            }
            let connection: SwitchboardConnection
            do {
                connection = try await self.establish()
            } catch {
                if Self.isFatal(error, duringSession: false, canRenewToken: self.hasTokenProvider) {
                    self.finish(error: error, goAway: nil, requestedByApp: false)
                    return nil
                }
                self.logger.debug(
                    "reconnect attempt failed",
                    metadata: ["switchboard.attempt": "\(attempt)", "switchboard.error": "\(error)"])
                lastError = error
                continue
            }
            let forwarder = self.startForwarding(connection)
            // The session's user as the gateway named it (a token's user when the configuration names none).
            let ownUserID = connection.welcome.userId.isEmpty ? self.configuration.userID : connection.welcome.userId
            let (subscriptions, requests) = self.withCore { core in
                let subscriptions = core.ledger.subscriptions
                return (subscriptions, subscriptions.map { core.ledger.request(for: $0, ownUserID: ownUserID) })
            }
            var report = await SubscriptionRestorer.restore(
                subscriptions, requests: requests, on: connection, timeout: self.configuration.requestTimeout)
            // The online-only events missed meanwhile (SB-13.4-9), once the session is as it was.
            if let point = self.withCore({ $0.ledger.eventReplay }), connection.isActive {
                let request = Request.resumeEvents(ResumeEventsRequest(epoch: point.epoch, after: point.position))
                do {
                    let response = try await connection.send(request, timeout: self.configuration.requestTimeout)
                    if case .resumeEvents(let answer) = response { report.events = answer }
                    self.withCore { $0.ledger.record(request, outcome: .success(response)) }
                } catch {
                    self.logger.warning(
                        "online-only events were not resumed", metadata: ["switchboard.error": "\(error)"])
                }
            }
            guard connection.isActive else {
                // Lost again while restoring: that counts as a failed attempt.
                await forwarder.value
                lastError = await connection.closeReason
                    ?? SwitchboardClientError(code: .unavailable, message: "lost while restoring", kind: .connectionLost)
                continue
            }
            self.withCore { core in
                for failure in report.failed where failure.error.kind == .server {
                    core.ledger.forget(failure.subscription)
                }
                for case .changes(let request) in report.restored {
                    if let answer = report.changeStream {
                        core.ledger.record(.subscribeChanges(request), outcome: .success(.subscribeChanges(answer)))
                    }
                }
            }
            guard self.publish(connection, replacing: .reconnecting(attempt: attempt)) else {
                await connection.close()  // the app closed the client meanwhile
                await forwarder.value
                return nil
            }
            self.logger.info(
                "reconnected",
                metadata: [
                    "switchboard.session": "\(connection.welcome.sessionId)", "switchboard.attempt": "\(attempt)",
                    "switchboard.restored": "\(report.restored.count)",
                ])
            for failure in report.failed {
                self.logger.warning(
                    "a subscription was not restored",
                    metadata: [
                        "switchboard.subscription": "\(failure.subscription)", "switchboard.error": "\(failure.error)",
                    ])
            }
            self.report(.connected(connection.welcome))
            self.report(.restored(report))
            return (connection, forwarder)
        }
    }

    /// Records the attempt under way, unless the app is closing the client.
    private func markReconnecting(attempt: Int) -> Bool {
        self.withCore { core in
            guard case .reconnecting = core.phase else { return false }
            core.phase = .reconnecting(attempt: attempt)
            return true
        }
    }

    /// Whether `error` ends the client instead of another attempt: the server refused who the client is
    /// (`2xxx`: no, forged or expired token, wrong user), speaks another protocol version (`1008`), or refused a
    /// HELLO field (`7xxx`). A token that expired during a session is not final when a token provider can give
    /// a fresh one.
    static func isFatal(_ error: SwitchboardClientError, duringSession: Bool, canRenewToken: Bool) -> Bool {
        if error.code == .unsupportedVersion { return true }
        switch error.errorClass {
        case .auth:
            return !(duringSession && error.code == .tokenExpired && canRenewToken)
        case .invalidArgument:
            return true
        default:
            return false
        }
    }
}
