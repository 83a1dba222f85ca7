@testable import SwitchboardServer
import Testing

/// When a connection decodes and reads, without a connection: paused read passes, HELLO's verification, the
/// output path holding reads back, and closing.
@Suite struct InputStateMachineTests {
    @Test func readsGoOnWhileDecodingRunsAndNothingHoldsThemBack() {
        var machine = InputStateMachine()
        #expect(machine.decodes)
        let step1 = machine.readRequested(readsHeldBack: false)
        #expect(step1)
        #expect(!machine.readWaiting)
    }

    @Test func aReadWaitsWhileTheOutputHoldsReadsBackAndGoesWhenReleased() {
        var machine = InputStateMachine()
        let step2 = machine.readRequested(readsHeldBack: true)
        #expect(!step2)
        #expect(machine.readWaiting)
        let step3 = machine.readsReleased()
        #expect(step3 == .read)
        #expect(!machine.readWaiting)
        let step4 = machine.readsReleased()
        #expect(step4 == .none, "the read went once")
    }

    @Test func aPassOverTheOutputLimitPausesAndResumesOnALaterTick() {
        var machine = InputStateMachine()
        machine.outputLimitReached()
        #expect(!machine.decodes)
        let step5 = machine.readRequested(readsHeldBack: false)
        #expect(!step5, "nothing new is read while the output leaves")
        let step6 = machine.pausedOutputFlushed(readsHeldBack: false)
        #expect(step6 == .scheduleResume)
        #expect(machine.decoding == .paused(resumeScheduled: true))
        let step7 = machine.readsReleased()
        #expect(step7 == .none, "the resume is queued once")
        let step8 = machine.resumeRan(readsHeldBack: false)
        #expect(step8)
        #expect(machine.decodes)
        let step9 = machine.heldInputDecoded(readsHeldBack: false)
        #expect(step9 == .read, "the read asked for meanwhile goes now")
    }

    @Test func aPausedPassWhoseOutputBacksUpResumesOnlyOnceReadsAreReleased() {
        var machine = InputStateMachine()
        machine.outputLimitReached()
        let step10 = machine.pausedOutputFlushed(readsHeldBack: true)
        #expect(step10 == .none)
        #expect(machine.decoding == .paused(resumeScheduled: false))
        let step11 = machine.readsReleased()
        #expect(step11 == .scheduleResume)
        let step12 = machine.resumeRan(readsHeldBack: true)
        #expect(!step12, "held back again before the resume ran")
        #expect(machine.decoding == .paused(resumeScheduled: false))
        let step13 = machine.readsReleased()
        #expect(step13 == .scheduleResume)
        let step14 = machine.resumeRan(readsHeldBack: false)
        #expect(step14)
        let step15 = machine.heldInputDecoded(readsHeldBack: false)
        #expect(step15 == .none, "no read was asked for")
    }

    @Test func aResumeAfterDecodingRanAgainDoesNothing() {
        var machine = InputStateMachine()
        let step16 = machine.resumeRan(readsHeldBack: false)
        #expect(!step16)
        #expect(machine.decodes)
    }

    @Test func framesWaitUndecodedWhileHellosTokenIsVerified() {
        var machine = InputStateMachine()
        machine.helloVerificationStarted()
        #expect(!machine.decodes)
        let step17 = machine.readRequested(readsHeldBack: false)
        #expect(!step17)
        let step18 = machine.inputEnded()
        #expect(step18, "the end of input waits behind the frames received before it")
        let step19 = machine.helloVerified()
        #expect(step19, "decoding waited for the verdict")
        #expect(machine.decodes)
        let step20 = machine.heldInputDecoded(readsHeldBack: false)
        #expect(step20 == .endOfInput)
        let step21 = machine.heldInputDecoded(readsHeldBack: false)
        #expect(step21 == .read)
        let step22 = machine.helloVerified()
        #expect(!step22, "no verification runs any more")
    }

    @Test func theEndOfInputIsHandledAtOnceWhileDecodingRuns() {
        var machine = InputStateMachine()
        let step23 = machine.inputEnded()
        #expect(!step23)
        #expect(!machine.endOfInputWaiting)
    }

    @Test func aWaitingReadStaysWhileReadsAreHeldBackAfterTheHeldInput() {
        var machine = InputStateMachine()
        machine.outputLimitReached()
        _ = machine.readRequested(readsHeldBack: false)
        _ = machine.pausedOutputFlushed(readsHeldBack: false)
        let step24 = machine.resumeRan(readsHeldBack: false)
        #expect(step24)
        let step25 = machine.heldInputDecoded(readsHeldBack: true)
        #expect(step25 == .none)
        #expect(machine.readWaiting)
        machine.outputLimitReached()
        let step26 = machine.heldInputDecoded(readsHeldBack: false)
        #expect(step26 == .none, "paused again: nothing is passed on")
    }

    @Test func closingForgetsHeldInputAndReadsUntilTheClientCloses() {
        var machine = InputStateMachine()
        machine.outputLimitReached()
        _ = machine.readRequested(readsHeldBack: false)
        let step27 = machine.inputEnded()
        #expect(step27)
        let step28 = machine.closing()
        #expect(step28 == .read)
        #expect(machine.decodes && !machine.endOfInputWaiting && !machine.readWaiting)
        let step29 = machine.readRequested(readsHeldBack: false)
        #expect(step29)
    }

    @Test func closingDuringHellosVerificationKeepsReadsStoppedUntilTheVerdict() {
        var machine = InputStateMachine()
        machine.helloVerificationStarted()
        _ = machine.readRequested(readsHeldBack: false)
        let step30 = machine.closing()
        #expect(step30 == .read, "the waiting read goes")
        let step31 = machine.readRequested(readsHeldBack: false)
        #expect(!step31, "but reads stop again until the verdict")
        let step32 = machine.helloVerified()
        #expect(step32)
    }
}
