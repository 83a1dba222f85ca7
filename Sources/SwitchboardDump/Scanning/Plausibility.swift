import NIOCore
import SwitchboardWire

/// Decides where a frame may start again after garbage.
///
/// An offset is a **plausible frame start** when all of these hold:
///
/// 1. the length field there is a minimal varint of 1 to 4 bytes whose value is from 2 to the maximum frame size;
/// 2. the whole frame (length field plus that many bytes) is present;
/// 3. its header passes every framing check of `Protocol/SPEC.md` §2: no reserved flag bits, a class the direction
///    allows, ERROR only on a response, a valid request id on requests and responses, and for a COMPRESSED frame an
///    inflated length within the limit and a zlib stream that inflates to exactly that length;
/// 4. its op is one this version of the protocol knows (control op, operation or push code) and its body decodes
///    without any error;
/// 5. the bytes after it are the end of the input, or begin a sound frame header: a length as in (1), then flags and
///    type as in (3). At the end of the input, a header cut short after its first bytes passes if those bytes do.
///
/// Checks 4 and 5 make a false start in random bytes rare: a stray `02 00 03` (an empty PING) must also be followed
/// by a sound header. Frames that are only wrong in their body (an unknown op, a malformed body) are reported as
/// frames while decoding goes frame by frame, but they do not count as plausible when looking for where to resume.
enum Plausibility {
    enum Verdict: Equatable {
        /// A frame starts here.
        case plausible
        /// No frame starts here.
        case implausible
        /// More bytes are needed to decide (never returned at the end of the input).
        case needMoreBytes
    }

    static func check(
        _ buffer: ByteBuffer, at index: Int, atEnd: Bool, limits: FrameLimits, direction: FrameDirection
    ) -> Verdict {
        guard var candidate = buffer.getSlice(at: index, length: buffer.writerIndex - index) else { return .implausible }
        var decoder = FrameDecoder(limits: limits, direction: direction)
        let frame: Frame
        do {
            guard let decoded = try decoder.decodeFrame(from: &candidate) else {
                return atEnd ? .implausible : .needMoreBytes
            }
            frame = decoded
        } catch {
            return .implausible
        }
        guard Self.opIsKnown(frame.header) else { return .implausible }
        do {
            _ = try SwitchboardMessage.decode(frame)
        } catch {
            return .implausible
        }
        // Check 5: what follows. Deciding only on complete evidence makes the outcome independent of how the
        // input was split into chunks.
        switch HeaderPeek.header(
            in: buffer, at: index + frame.wireSize, limits: limits, direction: direction)
        {
        case .sound: return .plausible
        case .unsound: return .implausible
        case .incomplete: return atEnd ? .plausible : .needMoreBytes
        }
    }

    static func opIsKnown(_ header: FrameHeader) -> Bool {
        switch header.kind {
        case .control: return ControlOp(rawValue: header.op) != nil
        case .request, .response: return Opcode(rawValue: header.op) != nil
        case .push: return PushCode(rawValue: header.op) != nil
        }
    }
}
