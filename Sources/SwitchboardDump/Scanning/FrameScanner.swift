import NIOCore
import SwitchboardWire

/// Splits one byte stream into frames for the dump, reporting garbage instead of failing.
///
/// Bytes are appended as they arrive, in chunks split anywhere; ``next()`` returns each frame or problem as soon as
/// it can be decided, and ``finish()`` settles the rest at the end of the stream. The outcome does not depend on
/// how the stream was split.
///
/// What happens after a framing error depends on ``Recovery``: ``Recovery/resynchronize`` scans forward, byte by
/// byte, for the next plausible frame start (see ``Plausibility``) and goes on from there; ``Recovery/stop``
/// reports the error and decodes nothing more, as a receiver would close the connection.
public struct FrameScanner: Sendable {
    /// What to do after a framing error.
    public enum Recovery: Sendable, Hashable {
        /// Skip to the next plausible frame and go on.
        case resynchronize
        /// Decode nothing more from this stream.
        case stop
    }

    /// Limits a frame must respect (the maximum frame and inflated sizes; compression is always accepted).
    public let limits: FrameLimits
    /// Classes of frame the stream may carry.
    public let direction: FrameDirection
    /// What to do after a framing error.
    public let recovery: Recovery

    private var buffer = ByteBuffer()
    /// Bytes dropped from the front of `buffer`: the stream offset of buffer index 0.
    private var discarded = 0
    private var framesSeen = 0
    /// While resynchronising: where the garbage began and why. The reader index is then the next offset to try.
    private var resync: (offset: Int, error: SwitchboardWireError)?
    private var stopped = false
    private var totalBytes = 0

    /// Creates a scanner.
    public init(limits: FrameLimits = .default, direction: FrameDirection = .any, recovery: Recovery) {
        self.limits = limits
        self.direction = direction
        self.recovery = recovery
    }

    /// Whether decoding stopped for good (``Recovery/stop`` after an error).
    public var isStopped: Bool { self.stopped }
    /// Bytes appended so far.
    public var bytesSeen: Int { self.totalBytes }
    /// Frames returned so far.
    public var frameCount: Int { self.framesSeen }

    /// Appends the next bytes of the stream. After the scanner stopped they are only counted.
    public mutating func append(_ bytes: ByteBuffer) {
        self.totalBytes += bytes.readableBytes
        guard !self.stopped else { return }
        if self.buffer.readableBytes == 0 {
            // Nothing pending: adopt the new bytes instead of copying them (the frames already returned may still
            // share the old storage, which appending would copy). Offsets stay continuous.
            self.discarded += self.buffer.writerIndex - bytes.readerIndex
            self.buffer = bytes
        } else {
            var bytes = bytes
            self.buffer.writeBuffer(&bytes)
        }
    }

    /// The next frame or problem that the bytes so far decide; nil when more bytes are needed.
    public mutating func next() -> ScanEvent? {
        self.step(atEnd: false)
    }

    /// Ends the stream: returns every remaining frame and problem, including a frame cut short by the end.
    public mutating func finish() -> [ScanEvent] {
        var events: [ScanEvent] = []
        while let event = self.step(atEnd: true) { events.append(event) }
        return events
    }

    private mutating func step(atEnd: Bool) -> ScanEvent? {
        guard !self.stopped else { return nil }
        defer { self.compact() }
        if self.resync != nil { return self.scanForResume(atEnd: atEnd) }
        let start = self.buffer.readerIndex
        guard self.buffer.readableBytes > 0 else { return nil }
        var candidate = self.buffer
        var decoder = FrameDecoder(limits: self.limits, direction: self.direction)
        do {
            guard let frame = try decoder.decodeFrame(from: &candidate) else {
                guard atEnd else { return nil }
                let error = SwitchboardWireError(
                    .truncatedFrame, "the stream ends inside a frame (\(self.buffer.readableBytes) bytes left)")
                return self.failed(at: start, error, atEnd: atEnd)
            }
            let record = self.record(frame, at: start)  // reads the frame's bytes, so before they are consumed
            self.buffer.moveReaderIndex(forwardBy: frame.wireSize)
            return .frame(record)
        } catch {
            return self.failed(at: start, error, atEnd: atEnd)
        }
    }

    private mutating func failed(at index: Int, _ error: SwitchboardWireError, atEnd: Bool) -> ScanEvent? {
        let offset = self.discarded + index
        switch self.recovery {
        case .stop:
            self.stopped = true
            let skipped: Int? = atEnd ? self.buffer.readableBytes : nil
            self.buffer.clear()
            return .stopped(StreamProblem(offset: offset, error: error, skippedBytes: skipped, resumedAt: nil))
        case .resynchronize:
            self.resync = (offset, error)
            self.buffer.moveReaderIndex(to: index + 1)
            return self.scanForResume(atEnd: atEnd)
        }
    }

    /// Tries each offset from the reader index on; garbage bytes are consumed as they are ruled out.
    private mutating func scanForResume(atEnd: Bool) -> ScanEvent? {
        guard let (offset, error) = self.resync else { return nil }
        while self.buffer.readableBytes > 0 {
            switch Plausibility.check(
                self.buffer, at: self.buffer.readerIndex, atEnd: atEnd, limits: self.limits,
                direction: self.direction)
            {
            case .needMoreBytes:
                return nil
            case .implausible:
                self.buffer.moveReaderIndex(forwardBy: 1)
            case .plausible:
                let resumedAt = self.discarded + self.buffer.readerIndex
                self.resync = nil
                return .garbage(
                    StreamProblem(offset: offset, error: error, skippedBytes: resumedAt - offset, resumedAt: resumedAt))
            }
        }
        guard atEnd else { return nil }
        let end = self.discarded + self.buffer.writerIndex
        self.resync = nil
        return .garbage(StreamProblem(offset: offset, error: error, skippedBytes: end - offset, resumedAt: nil))
    }

    private mutating func record(_ frame: Frame, at index: Int) -> DumpedFrame {
        self.framesSeen += 1
        let wireBytes = self.buffer.getSlice(at: index, length: frame.wireSize) ?? ByteBuffer()
        var length = frame.wireSize
        if case .value(let value, _) = HeaderPeek.varint(in: self.buffer, at: index, maxBytes: 4) {
            length = Int(value)
        }
        let compression = frame.compressedBodySize.map {
            CompressionInfo(compressedSize: $0, inflatedSize: frame.body.readableBytes)
        }
        let content: Result<SwitchboardMessage, SwitchboardWireError>
        do {
            content = .success(try SwitchboardMessage.decode(frame))
        } catch {
            content = .failure(error)
        }
        return DumpedFrame(
            offset: self.discarded + index, index: self.framesSeen, wireBytes: wireBytes, length: length,
            header: frame.header, compression: compression, content: content)
    }

    /// Drops consumed bytes once they are the larger part of the buffer, keeping offsets right.
    private mutating func compact() {
        guard self.buffer.readerIndex >= 4096,
            self.buffer.readerIndex * 2 >= self.buffer.writerIndex
        else { return }
        self.discarded += self.buffer.readerIndex
        self.buffer.discardReadBytes()
    }
}
