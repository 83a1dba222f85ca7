import NIOCore
@testable import SwitchboardServer
import SwitchboardWire
import Testing

/// The connection's life without a connection: which requests are admitted, when it drains and closes, and why the
/// session ends.
@Suite struct ConnectionStateMachineTests {
    static let t0 = NIODeadline.uptimeNanoseconds(1_000)

    static func loggedIn(maxInflight: Int = 4) -> ConnectionStateMachine {
        var machine = ConnectionStateMachine(maxInflight: maxInflight)
        machine.helloAccepted()
        return machine
    }

    @Test func requestsBeforeTheHandshakeAreNotAdmitted() {
        var machine = ConnectionStateMachine(maxInflight: 4)
        #expect(!machine.isLoggedIn && machine.isOpen)
        let step1 = machine.requestArrived(id: 1)
        #expect(step1 == .reject(.handshakeRequired, "no session"))
    }

    @Test func aDuplicateIdInFlightIsRejectedAndFreeAgainOnceAnswered() throws {
        var machine = Self.loggedIn()
        let step2 = machine.requestArrived(id: 7)
        #expect(step2 == .admit)
        machine.requestStarted(id: 7, at: Self.t0)
        let step3 = machine.requestArrived(id: 7)
        #expect(step3 == .reject(.duplicateRequestId, "request id 7 is already in flight"))
        let step4 = machine.answered(id: 7)
        let answer = try #require(step4)
        #expect(answer.arrival == Self.t0 && answer.then == .none)
        let step5 = machine.answered(id: 7)
        #expect(step5 == nil, "a second answer to the same id is dropped")
        let step6 = machine.requestArrived(id: 7)
        #expect(step6 == .admit)
    }

    @Test func moreThanMaxInflightIsRejected() {
        var machine = Self.loggedIn(maxInflight: 2)
        for id in 1...2 as ClosedRange<UInt32> {
            let step7 = machine.requestArrived(id: id)
            #expect(step7 == .admit)
            machine.requestStarted(id: id, at: Self.t0)
        }
        let step8 = machine.requestArrived(id: 3)
        #expect(step8 == .reject(.tooManyInflight, "more than 2 requests in flight"))
        #expect(machine.inFlightCount == 2)
    }

    @Test func lastRequestIdIsTheHighestIdReadRejectedOnesIncluded() {
        var machine = Self.loggedIn(maxInflight: 1)
        _ = machine.requestArrived(id: 5)
        machine.requestStarted(id: 5, at: Self.t0)
        _ = machine.requestArrived(id: 9)  // rejected: too many in flight
        _ = machine.requestArrived(id: 2)
        #expect(machine.highestRequestID == 9)
    }

    @Test func shutdownDrainsThenClosesAfterTheLastAnswer() throws {
        var machine = Self.loggedIn()
        _ = machine.requestArrived(id: 1)
        machine.requestStarted(id: 1, at: Self.t0)
        _ = machine.requestArrived(id: 2)
        machine.requestStarted(id: 2, at: Self.t0)
        let step9 = machine.shutdownRequested()
        #expect(
            step9
                == .sendGoAway(
                    code: ErrorCode.shuttingDown.rawValue, reason: .serverShutdown, message: "the server is shutting down",
                    thenClose: false))
        #expect(machine.state == .draining && machine.endReason == .serverShutdown)
        let step10 = machine.requestArrived(id: 3)
        #expect(step10 == .reject(.shuttingDown, "the server is shutting down"))
        let step11 = machine.answered(id: 1)
        #expect(try #require(step11).then == .none)
        let step12 = machine.answered(id: 2)
        #expect(try #require(step12).then == .closeConnection)
        let step13 = machine.shutdownRequested()
        #expect(step13 == .none, "a second shutdown changes nothing")
    }

    @Test func shutdownWithNothingInFlightClosesAtOnceAndBeforeHelloFails() {
        var idle = Self.loggedIn()
        guard case .sendGoAway(_, _, _, thenClose: true) = idle.shutdownRequested() else {
            Issue.record("an idle session should close right after GOAWAY")
            return
        }
        var fresh = ConnectionStateMachine(maxInflight: 4)
        let step14 = fresh.shutdownRequested()
        #expect(step14 == .fail(.shuttingDown, .serverShutdown, "the server is shutting down"))
    }

    @Test func theGracePeriodsEndClosesTheSocketOfAClosingConnection() {
        var open = Self.loggedIn()
        let step15 = open.shutdownGraceEnded()
        #expect(step15 == .closeConnection)
        #expect(open.endReason == .serverShutdown)
        var closing = Self.loggedIn()
        let step16 = closing.closing()
        #expect(step16)
        let step17 = closing.closing()
        #expect(!step17, "closing twice is nothing")
        let step18 = closing.shutdownGraceEnded()
        #expect(step18 == .closeSocket)
    }

    @Test func inputEndingInsideAFrameFailsWith1011AndBetweenFramesWaitsForAnswersInFlight() throws {
        var partial = Self.loggedIn()
        let step19 = partial.inputClosed(partialFrameBytes: 3)
        #expect(step19 == .fail(.truncatedFrame, .abnormal, "the stream ended inside a frame"))

        var idle = Self.loggedIn()
        let step20 = idle.inputClosed(partialFrameBytes: 0)
        #expect(step20 == .closeConnection)

        var busy = Self.loggedIn()
        _ = busy.requestArrived(id: 1)
        busy.requestStarted(id: 1, at: Self.t0)
        let step21 = busy.inputClosed(partialFrameBytes: 0)
        #expect(step21 == .none)
        #expect(busy.state == .draining)
        let step22 = busy.answered(id: 1)
        #expect(try #require(step22).then == .closeConnection)

        var closing = Self.loggedIn()
        _ = closing.closing()
        let step23 = closing.inputClosed(partialFrameBytes: 0)
        #expect(step23 == .closeSocket, "a draining close waited for the client's end")
    }

    @Test func theFirstReasonGivenIsTheSessionsEndReason() {
        var machine = Self.loggedIn()
        let step24 = machine.failing(reason: .protocolError)
        #expect(step24)
        let step25 = machine.failing(reason: .abnormal)
        #expect(step25)
        #expect(machine.endReason == .protocolError)
        _ = machine.closing()
        let step26 = machine.failing(reason: .abnormal)
        #expect(!step26, "a closed connection fails no more")
        let step27 = machine.channelClosed()
        #expect(step27 == .protocolError)

        var silent = Self.loggedIn()
        let step28 = silent.channelClosed()
        #expect(step28 == .abnormal, "a connection that just broke ended abnormally")
    }

    @Test func logoutAndThePeersGoAwayEndNormallyOrNot() {
        var loggingOut = Self.loggedIn()
        let step29 = loggingOut.loggedOut()
        #expect(step29 == .sendGoAway(code: 0, reason: .logout, message: "logged out", thenClose: true))
        #expect(loggingOut.endReason == .logout)
        var normal = Self.loggedIn()
        let step30 = normal.peerSentGoAway(code: 0)
        #expect(step30 == .closeConnection && normal.endReason == .logout)
        var failing = Self.loggedIn()
        let step31 = failing.peerSentGoAway(code: 1001)
        #expect(step31 == .closeConnection && failing.endReason == .abnormal)
    }

    @Test func theSlowConsumerCutOffSaysSo() {
        var machine = Self.loggedIn()
        let step32 = machine.cutOffAsSlowConsumer(queuedBytes: 9_000_000)
        #expect(
            step32
                == .sendGoAway(
                    code: ErrorCode.slowConsumer.rawValue, reason: .slowConsumer,
                    message: "outbound queue passed 9000000 bytes", thenClose: true))
        #expect(machine.endReason == .slowConsumer)
    }
}

/// The deadlines of a connection: the handshake timeout, the heartbeat window, the token's notice and expiry.
@Suite struct ConnectionDeadlineTests {
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    static func connected() -> ConnectionStateMachine {
        var machine = ConnectionStateMachine(maxInflight: 4, heartbeatMisses: 3)
        machine.connected(at: Self.start, handshakeTimeout: .seconds(10))
        return machine
    }

    @Test func noHelloWithinTheHandshakeTimeoutFailsWith1007() {
        var machine = Self.connected()
        let early = machine.deadlinesPassed(now: Self.start + .milliseconds(9_999), nowMillis: 0)
        #expect(early == .init())
        let late = machine.deadlinesPassed(now: Self.start + .seconds(10), nowMillis: 0)
        #expect(late.action == .fail(.handshakeRequired, .protocolError, "no HELLO within the handshake timeout"))
    }

    @Test func anOverdueHelloWhoseBytesTheServerHasNotReadYetIsNotTimedOut() {
        var machine = Self.connected()
        let late = Self.start + .seconds(10)
        #expect(machine.handshakeOverdue(now: late))
        #expect(!machine.handshakeOverdue(now: late - .nanoseconds(1)))
        #expect(machine.deadlinesPassed(now: late, nowMillis: 0, firstBytesUnread: true) == .init())
        let read = machine.deadlinesPassed(now: late + .milliseconds(100), nowMillis: 0, firstBytesUnread: false)
        #expect(read.action == .fail(.handshakeRequired, .protocolError, "no HELLO within the handshake timeout"))
        machine.helloAccepted()
        #expect(!machine.handshakeOverdue(now: late))
    }

    @Test func theHeartbeatWindowCountsFromTheLastCompleteFrame() {
        var machine = Self.connected()
        machine.helloAccepted(heartbeatInterval: .seconds(1))
        let afterHandshake = machine.deadlinesPassed(now: Self.start + .seconds(20), nowMillis: 0)
        #expect(
            afterHandshake.action == .fail(.heartbeatTimeout, .abnormal, "nothing received for 3 heartbeat intervals"),
            "no frame since the connection opened: the window (3 x 1 s) has passed")

        var fed = Self.connected()
        fed.helloAccepted(heartbeatInterval: .seconds(1))
        fed.lastFrameReceived = Self.start + .seconds(18)
        let within = fed.deadlinesPassed(now: Self.start + .seconds(21), nowMillis: 0)
        #expect(within == .init(), "exactly the window since the last frame is not past it")
        let past = fed.deadlinesPassed(now: Self.start + .milliseconds(21_001), nowMillis: 0)
        #expect(past.action != .none)
    }

    @Test func theTokenNoticeComesOnceAMinuteAheadThenTheExpiryFailsWith2002() {
        var machine = Self.connected()
        machine.helloAccepted(heartbeatInterval: .seconds(300))
        let dueNow = machine.tokenRenewed(expiresAtMs: 100_000, nowMillis: 10_000)
        #expect(!dueNow)
        let before = machine.deadlinesPassed(now: Self.start, nowMillis: 39_999)
        #expect(before == .init())
        let notice = machine.deadlinesPassed(now: Self.start, nowMillis: 40_000)
        #expect(notice == .init(tokenNoticeForExpiryAtMs: 100_000))
        let again = machine.deadlinesPassed(now: Self.start, nowMillis: 50_000)
        #expect(again == .init(), "the notice is sent once")
        let expired = machine.deadlinesPassed(now: Self.start, nowMillis: 100_000)
        #expect(expired.action == .fail(.tokenExpired, .authExpired, "the session's token expired; renew it before it does"))
    }

    @Test func aRenewalMovesTheExpiryAndANearOneIsNoticedAtOnce() {
        var machine = Self.connected()
        machine.helloAccepted(heartbeatInterval: .seconds(300))
        let near = machine.tokenRenewed(expiresAtMs: 30_000, nowMillis: 10_000)
        #expect(near, "less than a minute left: the notice is due at once")
        let renewed = machine.tokenRenewed(expiresAtMs: 1_000_000, nowMillis: 20_000)
        #expect(!renewed)
        let later = machine.deadlinesPassed(now: Self.start, nowMillis: 500_000)
        #expect(later == .init(), "the old expiry no longer ends the session")
        let extreme = machine.tokenRenewed(expiresAtMs: .min, nowMillis: 0)
        #expect(extreme, "an expiry at the far past does not overflow the notice time")
    }
}
