import NIOCore
@testable import SwitchboardServer
import Testing

/// A connection's output path without a connection: coalescing, direct sends, pushes against answers, the water
/// marks, the hard cap and closing.
@Suite struct OutboundStateMachineTests {
    static let limits = OutboundStateMachine.Limits(highWaterMark: 100, lowWaterMark: 50, hardCap: 1000)
    let allocator = ByteBufferAllocator()

    static func machine(socket: Bool = true) -> OutboundStateMachine {
        OutboundStateMachine(limits: Self.limits, hasSocket: socket)
    }

    /// Appends `text` as a frame of this tick and returns what the machine asked of the tick.
    func append(_ text: String, to machine: inout OutboundStateMachine) -> OutboundStateMachine.TickAction {
        machine.append(capacity: 64, allocator: self.allocator) { $0.writeString(text) }
    }

    // MARK: coalescing

    @Test func framesOfAReadLeaveInOneSendWhenTheReadEnds() {
        var machine = Self.machine()
        machine.readStarted()
        for text in ["a", "b", "c"] {
            let tick = self.append(text, to: &machine)
            #expect(tick == .none, "a read's frames wait for the end of the read, not for a scheduled flush")
        }
        machine.readEnded()
        #expect(machine.tick == .idle)
        let step1 = machine.flushDue()
        #expect(step1 == .sendDirectly(ByteBuffer(string: "abc")))
        let step2 = machine.flushDue()
        #expect(step2 == .none, "nothing is owed any more")
    }

    @Test func withoutASocketOutputGoesThroughTheChannel() {
        var machine = Self.machine(socket: false)
        _ = self.append("abc", to: &machine)
        let step3 = machine.flushDue()
        #expect(step3 == .flushChannel(ByteBuffer(string: "abc")))
        let step4 = machine.channelFlushStarted()
        #expect(!step4, "without a socket nothing can overtake a flush: it is not tracked")
    }

    @Test func outputOutsideAReadSchedulesOneFlushPerTick() {
        var machine = Self.machine()
        let step5 = self.append("a", to: &machine)
        #expect(step5 == .scheduleFlush)
        let step6 = self.append("b", to: &machine)
        #expect(step6 == .none, "one flush per tick")
        machine.scheduledFlushStarted()
        #expect(machine.tick == .idle)
        let step7 = machine.flushDue()
        #expect(step7 == .sendDirectly(ByteBuffer(string: "ab")))
        let step8 = self.append("c", to: &machine)
        #expect(step8 == .scheduleFlush, "the next tick schedules its own flush")
    }

    @Test func aFlushScheduledBeforeAReadIsRememberedAcrossIt() {
        var machine = Self.machine()
        let step9 = self.append("a", to: &machine)
        #expect(step9 == .scheduleFlush)
        machine.readStarted()
        #expect(machine.tick == .reading(flushScheduled: true))
        let step10 = self.append("b", to: &machine)
        #expect(step10 == .none)
        machine.readEnded()
        #expect(machine.tick == .flushScheduled)
        let step11 = machine.flushRequested()
        #expect(step11 == .none, "already scheduled")
        machine.scheduledFlushStarted()
        #expect(machine.tick == .idle)
    }

    @Test func theScheduledFlushRunningInsideAReadLeavesTheReadToFlush() {
        var machine = Self.machine()
        _ = self.append("a", to: &machine)
        machine.readStarted()
        machine.scheduledFlushStarted()
        #expect(machine.tick == .reading(flushScheduled: false))
        machine.readEnded()
        #expect(machine.tick == .idle)
    }

    @Test func nothingOwedWritesNothing() {
        var machine = Self.machine()
        let step12 = machine.flushDue()
        #expect(step12 == .none)
    }

    @Test func whileTheChannelHoldsAFlushOutputFollowsItThroughTheChannel() {
        var machine = Self.machine()
        let step13 = machine.channelFlushStarted()
        #expect(step13, "with a socket, a channel flush is tracked")
        #expect(!machine.socketIsFree)
        _ = self.append("a", to: &machine)
        let step14 = machine.flushDue()
        #expect(step14 == .flushChannel(ByteBuffer(string: "a")), "a direct send would overtake it")
        machine.channelFlushCompleted()
        #expect(machine.socketIsFree)
        _ = self.append("b", to: &machine)
        let step15 = machine.flushDue()
        #expect(step15 == .sendDirectly(ByteBuffer(string: "b")))
    }

    // MARK: pushes

    @Test func aPushToAnIdleConnectionGoesToTheSocketOncePerGeneration() {
        var machine = Self.machine()
        let step16 = machine.pushArrived(encodedBytes: nil, generation: 1)
        #expect(step16 == .sendDirectly)
        let step17 = machine.pushArrived(encodedBytes: nil, generation: 1)
        #expect(step17 == .append, "a burst gathers in the output")
        let step18 = machine.pushArrived(encodedBytes: 10, generation: 1)
        #expect(step18 == .writeToChannel(after: nil))
        let step19 = machine.pushArrived(encodedBytes: nil, generation: 2)
        #expect(step19 == .append, "written unflushed: it waits")
        let step20 = machine.flushDue()
        #expect(step20 == .flushChannel(nil))
        let step21 = machine.pushArrived(encodedBytes: nil, generation: 2)
        #expect(step21 == .sendDirectly)
    }

    @Test func noPushGoesDirectlyDuringAReadWithoutASocketOrWithoutGenerations() {
        var reading = Self.machine()
        reading.readStarted()
        let step22 = reading.pushArrived(encodedBytes: nil, generation: 1)
        #expect(step22 == .append)
        var noSocket = Self.machine(socket: false)
        let step23 = noSocket.pushArrived(encodedBytes: nil, generation: 1)
        #expect(step23 == .append)
        var noBatch = Self.machine()
        let step24 = noBatch.pushArrived(encodedBytes: nil, generation: nil)
        #expect(step24 == .append)
        var owing = Self.machine()
        _ = self.append("answer", to: &owing)
        let step25 = owing.pushArrived(encodedBytes: nil, generation: 1)
        #expect(step25 == .append, "it leaves behind the answer")
    }

    @Test func aLargeEncodedPushIsWrittenSharedBehindTheTicksFramesAndASmallOneCopied() {
        var machine = Self.machine()
        _ = self.append("answer", to: &machine)
        let step26 = machine.pushArrived(encodedBytes: 100, generation: nil)
        #expect(step26 == .append, "small: copied into the output")
        let large = OutboundStateMachine.sharedPushMinimumBytes
        let step27 = machine.pushArrived(encodedBytes: large, generation: nil)
        #expect(step27 == .writeToChannel(after: ByteBuffer(string: "answer")))
        #expect(machine.pendingBytes == 0, "the tick's frames went to the channel ahead of the push")
        let step28 = machine.flushDue()
        #expect(step28 == .flushChannel(nil), "what was written to the channel is flushed")
        let step29 = machine.flushDue()
        #expect(step29 == .none)
    }

    @Test func pushesWaitWhileTheWindowIsFullAndAnswersPassThem() {
        var machine = Self.machine()
        let step30 = machine.writabilityChanged(false)
        #expect(!step30)
        let step31 = machine.pushArrived(encodedBytes: 10, generation: 1)
        #expect(step31 == .hold)
        let step32 = machine.hold(ByteBuffer(string: "push"))
        #expect(step32 == .scheduleFlush, "the end of the tick checks the limits")
        _ = self.append("answer", to: &machine)
        machine.scheduledFlushStarted()
        let step33 = machine.flushDue()
        #expect(step33 == .flushChannel(ByteBuffer(string: "answer")), "the answer passes the held push")
        let step34 = machine.writabilityChanged(true)
        #expect(step34, "the window opened: release the held pushes")
        let step35 = machine.pushArrived(encodedBytes: 10, generation: 2)
        #expect(step35 == .hold, "held pushes keep their order")
    }

    @Test func heldPushesAloneStillCountAgainstTheLimits() {
        var machine = Self.machine()
        _ = machine.writabilityChanged(false)
        _ = machine.hold(ByteBuffer(string: "push"))
        machine.scheduledFlushStarted()
        let step36 = machine.flushDue()
        #expect(step36 == .checkQueue)
    }

    @Test func aReleaseHandsHeldPushesOverInOrderWhileTheChannelTakesThem() {
        var machine = Self.machine()
        _ = machine.writabilityChanged(false)
        for text in ["1", "2", "3"] { _ = machine.hold(ByteBuffer(string: text)) }
        _ = machine.writabilityChanged(true)
        let step37 = machine.releaseStarted()
        #expect(step37)
        let step38 = machine.nextHeldPush(channelWritable: true)
        #expect(step38 == ByteBuffer(string: "1"))
        let step39 = machine.nextHeldPush(channelWritable: false)
        #expect(step39 == nil, "the window filled up")
        let step40 = machine.releaseRoundEnded()
        #expect(!step40)
        #expect(machine.release == .idle)
        let step41 = machine.releaseStarted()
        #expect(step41)
        let step42 = machine.nextHeldPush(channelWritable: true)
        #expect(step42 == ByteBuffer(string: "2"))
        let step43 = machine.nextHeldPush(channelWritable: true)
        #expect(step43 == ByteBuffer(string: "3"))
        let step44 = machine.nextHeldPush(channelWritable: true)
        #expect(step44 == nil)
        let step45 = machine.releaseRoundEnded()
        #expect(!step45)
        #expect(!machine.output.isHoldingPushes && machine.socketIsFree)
    }

    @Test func aReleaseInsideAReleaseAsksForAnotherRoundInsteadOfRecursing() {
        var machine = Self.machine()
        _ = machine.writabilityChanged(false)
        for text in ["1", "2"] { _ = machine.hold(ByteBuffer(string: text)) }
        let step46 = machine.releaseStarted()
        #expect(step46)
        let step47 = machine.nextHeldPush(channelWritable: true)
        #expect(step47 == ByteBuffer(string: "1"))
        let step48 = machine.releaseStarted()
        #expect(!step48, "nested: the running release is asked for another round")
        #expect(machine.release == .releasingWithAnotherRoundRequested)
        let step49 = machine.releaseRoundEnded()
        #expect(step49, "pushes are still held: another round")
        #expect(machine.release == .releasing)
        let step50 = machine.nextHeldPush(channelWritable: true)
        #expect(step50 == ByteBuffer(string: "2"))
        let step51 = machine.releaseStarted()
        #expect(!step51)
        let step52 = machine.releaseRoundEnded()
        #expect(!step52, "nothing held: no more rounds")
        #expect(machine.release == .idle)
    }

    @Test func theSessionsCompressionChoosesThePushesEncoding() {
        var machine = Self.machine()
        let plain = ByteBuffer(string: "plain")
        let compressed = ByteBuffer(string: "z")
        #expect(machine.frame(plain: plain, compressed: compressed) == plain, "no zlib agreed: plain")
        machine.compressionAgreed()
        #expect(machine.frame(plain: plain, compressed: compressed) == compressed)
        #expect(machine.frame(plain: plain, compressed: nil) == plain, "under the threshold no compressed frame exists")
    }

    @Test func pushesInProgressAreCounted() {
        var machine = Self.machine()
        machine.pushStarted()
        machine.pushStarted()
        machine.pushFinished()
        #expect(machine.pushesInProgress == 1)
    }

    // MARK: limits

    @Test func readingStopsAtTheHighWaterMarkAndResumesBelowTheLowOne() {
        var machine = Self.machine()
        let step53 = machine.queueMeasured(channelBufferedBytes: 99, applyingHardCap: true)
        #expect(step53 == .none)
        let step54 = machine.queueMeasured(channelBufferedBytes: 100, applyingHardCap: true)
        #expect(step54 == .stopReading)
        #expect(machine.backpressure == .on)
        let step55 = machine.queueMeasured(channelBufferedBytes: 200, applyingHardCap: true)
        #expect(step55 == .none, "stopped already")
        let step56 = machine.queueMeasured(channelBufferedBytes: 50, applyingHardCap: true)
        #expect(step56 == .none, "not below the low mark")
        let step57 = machine.queueMeasured(channelBufferedBytes: 49, applyingHardCap: true)
        #expect(step57 == .resumeReading)
        #expect(machine.backpressure == .off)
    }

    @Test func queuedBytesCountTheTicksOutputAndTheHeldPushes() {
        var machine = Self.machine()
        _ = machine.append(capacity: 64, allocator: self.allocator) { $0.writeRepeatingByte(0, count: 40) }
        _ = machine.writabilityChanged(false)
        _ = machine.hold(ByteBuffer(repeating: 0, count: 40))
        #expect(machine.queuedBytes(channelBufferedBytes: 20) == 100)
        let step58 = machine.queueMeasured(channelBufferedBytes: 20, applyingHardCap: true)
        #expect(step58 == .stopReading)
    }

    @Test func pastTheHardCapTheClientIsCutOffAndItsHeldPushesDropped() {
        var machine = Self.machine()
        _ = machine.writabilityChanged(false)
        for _ in 0..<3 { _ = machine.hold(ByteBuffer(repeating: 1, count: 10)) }
        let step59 = machine.queueMeasured(channelBufferedBytes: 970, applyingHardCap: false)
        #expect(step59 == .stopReading)
        #expect(machine.output.isHoldingPushes, "without the hard cap applied nothing is dropped")
        let step60 = machine.queueMeasured(channelBufferedBytes: 971, applyingHardCap: true)
        #expect(step60 == .cutOff(queuedBytes: 1001, readsStopped: false))
        #expect(!machine.output.isHoldingPushes && machine.output.heldBytes == 0)
        var fresh = Self.machine()
        let step61 = fresh.queueMeasured(channelBufferedBytes: 5000, applyingHardCap: true)
        #expect(step61 == .cutOff(queuedBytes: 5000, readsStopped: true))
        let step62 = machine.queueMeasured(channelBufferedBytes: 1000, applyingHardCap: true)
        #expect(step62 == .none, "at the cap, not past it")
    }

    @Test func theQueueIsMeasuredOnlyWhenSomethingCanChange() {
        var machine = Self.machine()
        #expect(!machine.queueCheckNeeded, "nothing held, reading on, the window open")
        _ = machine.writabilityChanged(false)
        #expect(machine.queueCheckNeeded)
        _ = machine.writabilityChanged(true)
        _ = machine.queueMeasured(channelBufferedBytes: 100, applyingHardCap: true)
        #expect(machine.queueCheckNeeded, "reading is stopped: the low-water mark must be seen")
        _ = machine.queueMeasured(channelBufferedBytes: 0, applyingHardCap: true)
        #expect(!machine.queueCheckNeeded)
        _ = machine.hold(ByteBuffer(string: "push"))
        #expect(machine.queueCheckNeeded)
        _ = machine.closed()
        #expect(!machine.queueCheckNeeded, "a closed connection has no limits to apply")
    }

    // MARK: ending

    @Test func closingHandsOverTheLastOutputAndDropsHeldPushes() {
        var machine = Self.machine()
        _ = self.append("goaway", to: &machine)
        _ = machine.writabilityChanged(false)
        _ = machine.hold(ByteBuffer(string: "push"))
        _ = machine.queueMeasured(channelBufferedBytes: 500, applyingHardCap: false)
        let step63 = machine.closed()
        #expect(step63 == ByteBuffer(string: "goaway"))
        #expect(machine.phase == .closed && !machine.output.isHoldingPushes && machine.backpressure == .off)
        let step64 = machine.flushDue()
        #expect(step64 == .none)
        let released = machine.nextHeldPush(channelWritable: true)
        #expect(!machine.socketIsFree && released == nil)
        let step65 = machine.closed()
        #expect(step65 == nil, "nothing more was queued")
    }

    @Test func closingWhileASharedPushAwaitsItsFlushLeavesNothingToFlush() {
        var machine = Self.machine()
        let step66 = machine.pushArrived(encodedBytes: 600, generation: nil)
        #expect(step66 == .writeToChannel(after: nil))
        let step67 = machine.channelFlushStarted()
        #expect(step67)
        let step68 = machine.closed()
        #expect(step68 == nil, "the close's own write and flush carry the written push")
        let step69 = machine.flushDue()
        #expect(step69 == .none)
        machine.channelFlushCompleted()
        #expect(machine.channelFlushesPending == 0)
    }

    @Test func theChannelClosingForgetsHeldPushes() {
        var machine = Self.machine()
        _ = machine.writabilityChanged(false)
        _ = machine.hold(ByteBuffer(string: "push"))
        machine.channelClosed()
        #expect(!machine.output.isHoldingPushes && machine.phase == .closed)
        let step70 = machine.releaseRoundEnded()
        #expect(!step70)
    }
}
