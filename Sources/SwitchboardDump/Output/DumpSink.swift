import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where dump events go. The proxy calls it from its event loops, so it must not block.
public protocol DumpSink: Sendable {
    /// Takes one event.
    func receive(_ event: DumpEvent)
}

/// Renders events and writes them, one per line, to a file descriptor (standard output by default).
///
/// Rendering and writing happen on a serial queue, in the order events were received, so a slow terminal or pipe
/// never holds up the proxy's forwarding.
public final class LineWriterSink: DumpSink {
    private let renderer: any DumpRenderer
    private let fileDescriptor: Int32
    private let queue = DispatchQueue(label: "sbdump.output")

    /// Creates a sink.
    public init(renderer: any DumpRenderer, fileDescriptor: Int32 = 1) {
        self.renderer = renderer
        self.fileDescriptor = fileDescriptor
    }

    public func receive(_ event: DumpEvent) {
        self.queue.async {
            Self.write(self.renderer.render(event) + "\n", to: self.fileDescriptor)
        }
    }

    /// Waits until every event received so far is written.
    public func flush() {
        self.queue.sync {}
    }

    private static func write(_ text: String, to fileDescriptor: Int32) {
        let bytes = Array(text.utf8)
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { raw in
                #if canImport(Glibc)
                Glibc.write(fileDescriptor, raw.baseAddress! + written, raw.count - written)
                #else
                Darwin.write(fileDescriptor, raw.baseAddress! + written, raw.count - written)
                #endif
            }
            if result > 0 {
                written += result
            } else if result < 0 && errno == EINTR {
                continue
            } else {
                return  // the reader went away (EPIPE): drop the output, keep forwarding
            }
        }
    }
}
