import SwitchboardCLI
import SwitchboardClient
import SwitchboardWire
import Testing

@Suite("Exit statuses are stable and follow the error classes")
struct ExitStatusTests {
    @Test("each server error class has its own status, 80 plus the class digit")
    func serverErrorClassesMapToOwnStatuses() {
        let expected: [(ErrorCode, Int32)] = [
            (.malformedBody, 81), (.permissionDenied, 82), (.rateLimited, 83), (.metadataNotFound, 84),
            (.revisionConflict, 85), (.itemRevisionConflict, 85), (.lockHeld, 86), (.invalidArgument, 87),
            (.storageFailure, 88), (ErrorCode(rawValue: 9123), 80),
        ]
        for (code, status) in expected {
            #expect(ExitStatus.forServerError(code).rawValue == status, "\(code)")
        }
    }

    @Test("the table lists distinct statuses, usage 64, unavailable 69 and login refused 77 among them")
    func tableIsStable() {
        let numbers = ExitStatus.table.map(\.status.rawValue)
        #expect(Set(numbers).count == numbers.count)
        #expect(ExitStatus.usage.rawValue == 64)
        #expect(ExitStatus.unavailable.rawValue == 69)
        #expect(ExitStatus.timeout.rawValue == 75)
        #expect(ExitStatus.loginRefused.rawValue == 77)
        #expect(numbers == [0, 64, 65, 69, 70, 74, 75, 77, 80, 81, 82, 83, 84, 85, 86, 87, 88])
    }

    @Test("client errors without a server body are local: timeout 75, lost connection 69")
    func localClientErrors() {
        let timeout = CommandFailure.fromClientError(.init(code: .providerTimeout, message: "request 3 timed out"), op: .whoNow)
        #expect(timeout.status == .timeout && timeout.code == nil && timeout.name == "timeout")
        let lost = CommandFailure.fromClientError(.init(code: .unavailable, message: "connection closed"), op: .whoNow)
        #expect(lost.status == .unavailable && lost.code == nil)
        let shutdown = CommandFailure.fromClientError(.init(code: .shuttingDown, message: "closed: bye"), op: .whoNow)
        #expect(shutdown.status == .serverError && shutdown.code == .shuttingDown)
    }

    @Test("a server's provider timeout (with a body) is a server error, not a local timeout")
    func serverProviderTimeoutIsServerClass() {
        let body = ErrorBody(.providerTimeout, "no answer")
        let failure = CommandFailure.fromClientError(.init(code: .providerTimeout, message: "no answer", body: body), op: .getUserInfo)
        #expect(failure.status == .serverError && failure.code == .providerTimeout)
    }

    @Test("a refused login exits 77; a connection that cannot be made exits 69")
    func loginFailures() {
        for code in [ErrorCode.notAuthenticated, .invalidToken, .tokenExpired, .permissionDenied] {
            let failure = CommandFailure.fromLoginError(SwitchboardClientError(code: code, message: "no"), address: "unix:x")
            #expect(failure.status == .loginRefused && failure.code == code)
        }
        struct Refused: Error {}
        #expect(CommandFailure.fromLoginError(Refused(), address: "tcp:127.0.0.1:1").status == .unavailable)
        let full = CommandFailure.fromLoginError(SwitchboardClientError(code: .tooManyConnections, message: "full"), address: "x")
        #expect(full.status == .limitsError)
    }

    @Test("login failures say in plain words what went wrong and what to do")
    func loginFailuresInPlainWords() {
        let needsToken = CommandFailure.fromLoginError(
            SwitchboardClientError(code: .notAuthenticated, message: "this server requires a token", kind: .goAway),
            address: "127.0.0.1:7400")
        #expect(needsToken.textLine == "error 2000 notAuthenticated: login refused: this server requires a token: "
            + "give a token with --token or SWITCHBOARD_TOKEN (mint one with 'switchboard token')")
        let expired = CommandFailure.fromLoginError(
            SwitchboardClientError(code: .tokenExpired, message: "token expired at 5", kind: .goAway), address: "x")
        #expect(expired.message == "login refused: token expired at 5: mint a new one with 'switchboard token'")
        let noWelcome = CommandFailure.fromLoginError(
            SwitchboardClientError(code: .providerTimeout, message: "no WELCOME in time", kind: .timedOut),
            address: "unix:/run/sb.sock", timeout: .milliseconds(1500))
        #expect(noWelcome.status == .timeout)
        #expect(noWelcome.textLine
            == "error timeout: connected to unix:/run/sb.sock, but the gateway did not answer the login within 1.5 s")
        let refused = CommandFailure.fromLoginError(
            SwitchboardClientError(
                code: .unavailable, message: "cannot connect to 127.0.0.1:1: connection refused: is the gateway running?",
                kind: .connectFailed),
            address: "127.0.0.1:1")
        #expect(refused.textLine == "error unavailable: cannot connect to 127.0.0.1:1: connection refused: is the gateway running?")
    }
}
