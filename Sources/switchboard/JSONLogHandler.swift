import Foundation
import Glibc
import Logging
import Synchronization
import SwitchboardWire

/// `--log-format json`: each log record as one JSON object on one line of standard error, for log collectors that
/// parse lines rather than read them:
///
///     {"time":"2026-11-27T20:01:02.345Z","level":"info","label":"switchboard","message":"switchboard started","metadata":{"tcp":"127.0.0.1:7400"}}
///
/// `time` is UTC with milliseconds (RFC 3339), `level` swift-log's level name, `metadata` the handler's, the
/// metadata provider's and the record's metadata merged in that order (nested dictionaries and arrays stay JSON
/// objects and arrays; every other value is its description as a string). A record whose source is not the
/// gateway's own module also has `source`. Each line is written with one `write(2)`.
struct JSONLogHandler: LogHandler {
    /// The logger's label.
    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, logLevel: Logger.Level, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider) {
        self.label = label
        self.logLevel = logLevel
        self.metadataProvider = metadataProvider
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = self.metadata
        if let provided = self.metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let explicit = event.metadata { merged.merge(explicit) { $1 } }
        if let error = event.error { merged["error"] = "\(error)" }
        let line = Self.line(
            time: Date(), level: event.level, label: self.label, message: event.message.description,
            metadata: merged, source: event.source)
        Self.write(line)
    }

    /// The JSON line of one record (with its newline).
    static func line(
        time: Date, level: Logger.Level, label: String, message: String, metadata: Logger.Metadata, source: String
    ) -> String {
        var out = "{\"time\":"
        Self.appendString(Self.timestamp(time), to: &out)
        out += ",\"level\":"
        Self.appendString(level.rawValue, to: &out)
        out += ",\"label\":"
        Self.appendString(label, to: &out)
        out += ",\"message\":"
        Self.appendString(message, to: &out)
        out += ",\"metadata\":"
        Self.appendValue(.dictionary(metadata), to: &out)
        if source != "switchboard" {
            out += ",\"source\":"
            Self.appendString(source, to: &out)
        }
        out += "}\n"
        return out
    }

    /// `2026-11-27T20:01:02.345Z`.
    static func timestamp(_ date: Date) -> String {
        let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var seconds = time_t(milliseconds / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let fraction = Int(milliseconds % 1000)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = fraction < 10 ? "00\(fraction)" : fraction < 100 ? "0\(fraction)" : "\(fraction)"
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):"
            + "\(two(parts.tm_min)):\(two(parts.tm_sec)).\(millis)Z"
    }

    private static func appendValue(_ value: Logger.Metadata.Value, to out: inout String) {
        switch value {
        case .string(let text):
            Self.appendString(text, to: &out)
        case .stringConvertible(let convertible):
            Self.appendString(convertible.description, to: &out)
        case .dictionary(let dictionary):
            out += "{"
            for (index, key) in dictionary.keys.sorted().enumerated() {
                if index > 0 { out += "," }
                Self.appendString(key, to: &out)
                out += ":"
                Self.appendValue(dictionary[key]!, to: &out)
            }
            out += "}"
        case .array(let array):
            out += "["
            for (index, element) in array.enumerated() {
                if index > 0 { out += "," }
                Self.appendValue(element, to: &out)
            }
            out += "]"
        }
    }

    /// `text` as a JSON string: quotes, backslashes and control characters escaped (RFC 8259 §7).
    static func appendString(_ text: String, to out: inout String) {
        JSONValue.writeString(text, to: &out)
    }

    /// Serialises the writes of every handler, so that lines never interleave.
    private static let output = Mutex(())

    private static func write(_ line: String) {
        var bytes = Array(line.utf8)
        Self.output.withLock { _ in
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeMutableBytes {
                    Glibc.write(STDERR_FILENO, $0.baseAddress! + offset, $0.count - offset)
                }
                if written < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += written
            }
        }
    }
}
