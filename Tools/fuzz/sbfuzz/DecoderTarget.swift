import NIOCore
import SwitchboardWire

/// The frame decoder and message codec target: the input is a byte stream of frames.
enum DecoderTarget {
    /// Checks the codec's properties on one input; traps on a violation so libFuzzer records the input.
    static func run(_ bytes: UnsafeRawBufferPointer) {
        var buffer = ByteBuffer(bytes: bytes)
        let limits = FrameLimits(maxFrameSize: 64 << 10, maxInflatedSize: 256 << 10, compressionEnabled: true)
        var decoder = FrameDecoder(limits: limits)
        while true {
            let frame: Frame?
            let before = buffer.readerIndex
            do {
                frame = try decoder.decodeFrame(from: &buffer)
            } catch {
                // A typed error: the property holds. Errors found after framing consumed the frame, so go on with the
                // next one like sbdump does; errors in the length field leave the stream unusable.
                if buffer.readerIndex == before { return }
                continue
            }
            guard let frame else { return }
            guard let message = try? SwitchboardMessage.decode(frame) else { continue }
            // Whatever decodes must survive encode -> decode unchanged, compressed or not, and the JSON rendering.
            for threshold in [nil, 1] as [Int?] {
                var encoded = ByteBuffer()
                FrameEncoder(compressionThreshold: threshold).encode(message, into: &encoded)
                var again = FrameDecoder(limits: .default)
                guard let reframed = try? again.decodeFrame(from: &encoded),
                    let redecoded = try? SwitchboardMessage.decode(reframed), redecoded == message
                else {
                    fatalError("round trip changed \(message)")
                }
            }
            guard let json = try? JSONValue.parse(message.jsonValue.description),
                let fromJSON = try? SwitchboardMessage(json: json), fromJSON == message
            else {
                fatalError("JSON round trip changed \(message)")
            }
        }
    }
}
