/// When one connection decodes what it received and reads more, as a value.
///
/// Decoding stops for two reasons: a read pass produced ``ConnectionHandler/readPassOutputLimit`` bytes of output
/// (SB-5.9-4: it resumes on a later tick, once that output left), or HELLO's token is being verified (frames wait
/// undecoded until the verdict). Reading stops while decoding does, and while the output path holds reading back
/// (``OutboundStateMachine/Backpressure``, passed in as `readsHeldBack`); a read the channel asks for meanwhile,
/// and the client's end of input, wait here and are passed on when decoding runs again.
///
/// The ``ConnectionHandler`` feeds it the events and performs the ``Action`` it returns; the machine does no I/O
/// (`InputStateMachineTests`).
struct InputStateMachine {
    enum Decoding: Equatable {
        /// Received frames are decoded as they arrive.
        case running
        /// A read pass's output reached the limit; `resumeScheduled`: the resume is queued on the loop.
        case paused(resumeScheduled: Bool)
        /// HELLO's token is being verified: received frames wait undecoded.
        case awaitingHelloVerdict
    }

    /// What the handler does next.
    enum Action: Equatable {
        case none
        /// Ask the channel for a read.
        case read
        /// Queue the resume of decoding on the loop (``resumeRan(readsHeldBack:)`` when it runs).
        case scheduleResume
        /// Handle the end of input that waited (the client shut down its sending side).
        case endOfInput
    }

    private(set) var decoding: Decoding = .running
    /// The channel asked for a read while reading was stopped.
    private(set) var readWaiting = false
    /// The client ended its input while complete frames still waited to be decoded.
    private(set) var endOfInputWaiting = false

    /// Whether received bytes are decoded now.
    var decodes: Bool { self.decoding == .running }

    /// The channel asks for a read: true to read now; false when reading is stopped (the read waits).
    mutating func readRequested(readsHeldBack: Bool) -> Bool {
        if readsHeldBack || self.decoding != .running {
            self.readWaiting = true
            return false
        }
        return true
    }

    /// HELLO's token is being verified: decoding and reading stop until ``helloVerified()``.
    mutating func helloVerificationStarted() {
        self.decoding = .awaitingHelloVerdict
    }

    /// HELLO's verdict is in: whether decoding waited for it (the handler then decodes what arrived meanwhile).
    mutating func helloVerified() -> Bool {
        guard self.decoding == .awaitingHelloVerdict else { return false }
        self.decoding = .running
        return true
    }

    /// A read pass's output reached the limit: decoding pauses (the handler flushes that output and measures the
    /// queue, then calls ``pausedOutputFlushed(readsHeldBack:)``).
    mutating func outputLimitReached() {
        self.decoding = .paused(resumeScheduled: false)
    }

    /// The paused pass's output was flushed: decoding resumes on a later tick unless reading is held back (then
    /// once the output drained, ``readsReleased()``).
    mutating func pausedOutputFlushed(readsHeldBack: Bool) -> Action {
        readsHeldBack ? .none : self.scheduleResume()
    }

    private mutating func scheduleResume() -> Action {
        guard case .paused(resumeScheduled: false) = self.decoding else { return .none }
        self.decoding = .paused(resumeScheduled: true)
        return .scheduleResume
    }

    /// The queued resume runs: true if decoding resumes now (the handler decodes the held input); if reading is
    /// held back meanwhile, decoding stays paused until ``readsReleased()``.
    mutating func resumeRan(readsHeldBack: Bool) -> Bool {
        guard case .paused = self.decoding else { return false }
        guard !readsHeldBack else {
            self.decoding = .paused(resumeScheduled: false)
            return false
        }
        self.decoding = .running
        return true
    }

    /// The held input was decoded: pass on the end of input that waited, or the read the channel asked for.
    mutating func heldInputDecoded(readsHeldBack: Bool) -> Action {
        guard self.decoding == .running else { return .none }
        if self.endOfInputWaiting {
            self.endOfInputWaiting = false
            return .endOfInput
        }
        return self.readIfWaiting(readsHeldBack: readsHeldBack)
    }

    private mutating func readIfWaiting(readsHeldBack: Bool) -> Action {
        guard self.readWaiting, !readsHeldBack else { return .none }
        self.readWaiting = false
        return .read
    }

    /// The client ended its input: true if it waits (frames received before it are still to be decoded), false
    /// to handle it now.
    mutating func inputEnded() -> Bool {
        guard self.decoding != .running else { return false }
        self.endOfInputWaiting = true
        return true
    }

    /// The output path stopped holding reading back: decoding resumes if it was paused, or a waiting read goes.
    mutating func readsReleased() -> Action {
        if case .paused = self.decoding { return self.scheduleResume() }
        return self.readIfWaiting(readsHeldBack: false)
    }

    /// The connection closes: it reads (and discards) until the client closes; held input and a waiting end of
    /// input are forgotten. (A HELLO verification still running keeps reading stopped until its verdict.)
    mutating func closing() -> Action {
        if case .paused = self.decoding { self.decoding = .running }
        self.endOfInputWaiting = false
        return self.readIfWaiting(readsHeldBack: false)
    }
}
