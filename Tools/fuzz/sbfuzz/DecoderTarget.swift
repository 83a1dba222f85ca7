import NIOCore
#if canImport(Glibc)
import Glibc
#endif
import SwitchboardWire

// libFuzzer harness for the frame decoder and the message codec.
//
// Built with `-sanitize=fuzzer,address -DFUZZING` (see Tools/fuzz/run.sh) libFuzzer supplies `main` and calls
// `LLVMFuzzerTestOneInput`. Built normally, `sbfuzz FILE...` replays inputs (a crash file, a corpus) through the
// same function, so a fuzzer finding can be reproduced and debugged without the sanitizer build.

/// Checks the codec's properties on one input; traps on a violation so libFuzzer records the input.
func checkOneInput(_ bytes: UnsafeRawBufferPointer) {
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

#if FUZZING
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    checkOneInput(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// libFuzzer's entry point for programs that keep their own `main` (SwiftPM gives executables one).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt
#endif

@main
struct FuzzMain {
    static func main() throws {
        #if FUZZING
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, fuzzTestOneInput))
        #else
        try replay(CommandLine.arguments.dropFirst())
        #endif
    }

    /// Replays fuzzer inputs (a crash file, a corpus) through the same checks, without the sanitizer build.
    static func replay(_ paths: ArraySlice<String>) throws {
        if paths.isEmpty {
            print("usage: sbfuzz FILE...  (replays fuzzer inputs; Tools/fuzz/run.sh builds the fuzzer)")
            return
        }
        for path in paths {
            guard let file = fopen(path, "rb") else {
                print("cannot open \(path)")
                continue
            }
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65_536)
            while true {
                let read = fread(&chunk, 1, chunk.count, file)
                if read <= 0 { break }
                bytes.append(contentsOf: chunk[0..<read])
            }
            fclose(file)
            bytes.withUnsafeBytes { checkOneInput($0) }
            print("\(path): ok (\(bytes.count) bytes)")
        }
    }
}
