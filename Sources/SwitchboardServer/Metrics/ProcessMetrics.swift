#if canImport(Glibc)
import Glibc
#endif
import SwitchboardWire

/// The standard `process_*` families (as Prometheus client libraries export them) and `switchboard_build_info`,
/// read when a scrape asks (from `/proc` on Linux), in the text exposition format.
///
/// They are not swift-metrics metrics: their values belong to the process, not to something the gateway counts, so
/// they are read at each scrape instead of being kept up to date. ``MetricFamily/catalog`` describes them.
enum ProcessMetrics {
    /// One sample of the process's figures (nil where the system does not say).
    struct Sample: Equatable {
        var cpuSeconds: Double?
        var residentBytes: Double?
        var virtualBytes: Double?
        var openDescriptors: Double?
        var maxDescriptors: Double?
        var startTimeSeconds: Double?
    }

    /// The exposition text of every process family and of the build-info family, each with `# HELP` and `# TYPE`.
    static func exposition(version: String = SwitchboardVersion.current) -> [UInt8] {
        let sample = Self.read()
        var text = ""
        func family(_ name: String, _ value: Double?) {
            guard let value, let described = MetricFamily.named(name) else { return }
            text += "# HELP \(name) \(described.help)\n# TYPE \(name) \(described.kind.rawValue)\n"
            text += "\(name) \(Self.format(value))\n"
        }
        family("process_cpu_seconds_total", sample.cpuSeconds)
        family("process_resident_memory_bytes", sample.residentBytes)
        family("process_virtual_memory_bytes", sample.virtualBytes)
        family("process_open_fds", sample.openDescriptors)
        family("process_max_fds", sample.maxDescriptors)
        family("process_start_time_seconds", sample.startTimeSeconds)
        if let build = MetricFamily.named("switchboard_build_info") {
            text += "# HELP \(build.name) \(build.help)\n# TYPE \(build.name) \(build.kind.rawValue)\n"
            text += "\(build.name){version=\"\(Self.escapeLabel(version))\"} 1\n"
        }
        return Array(text.utf8)
    }

    /// The process's figures now.
    static func read() -> Sample {
        var sample = Sample()
        #if os(Linux)
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let pageSize = Double(sysconf(Int32(_SC_PAGESIZE)))
        if let stat = Self.file("/proc/self/stat"), let fields = Self.statFields(stat), fields.count > 21, ticks > 0 {
            // Fields after the command (proc(5), counted from 1): utime 14, stime 15, starttime 22, vsize 23, rss 24.
            let user = Double(fields[11]) ?? 0
            let system = Double(fields[12]) ?? 0
            sample.cpuSeconds = (user + system) / ticks
            if let start = Double(fields[19]), let boot = Self.bootTime() { sample.startTimeSeconds = boot + start / ticks }
            sample.virtualBytes = Double(fields[20])
            sample.residentBytes = Double(fields[21]).map { $0 * pageSize }
        }
        sample.openDescriptors = Self.countDescriptors()
        #endif
        var limits = rlimit()
        #if os(Linux)
        let resource = Int32(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        if getrlimit(resource, &limits) == 0 { sample.maxDescriptors = Double(limits.rlim_cur) }
        return sample
    }

    /// The fields of `/proc/self/stat` after the command name (which is in parentheses and may hold spaces).
    static func statFields(_ stat: String) -> [Substring]? {
        guard let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(after: close)...].split(separator: " ", omittingEmptySubsequences: true)
    }

    /// When the system booted, in seconds since the epoch (`btime` of `/proc/stat`).
    private static func bootTime() -> Double? {
        guard let stat = Self.file("/proc/stat") else { return nil }
        for line in stat.split(separator: "\n") where line.hasPrefix("btime ") {
            return Double(line.dropFirst("btime ".count).trimming(" "))
        }
        return nil
    }

    /// The number of open descriptors (entries of `/proc/self/fd`, less the one that lists them).
    private static func countDescriptors() -> Double? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { $0.first }
            if name != UInt8(ascii: ".") { count += 1 }
        }
        return Double(max(count - 1, 0))
    }

    /// A small text file (`/proc` files report a size of 0, so it is read until its end).
    private static func file(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A sample value as Prometheus writes it: integers without a fraction.
    static func format(_ value: Double) -> String {
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }

    /// A label value with `\`, `"` and newlines escaped.
    static func escapeLabel(_ value: String) -> String {
        var escaped = ""
        for character in value {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}

extension StringProtocol {
    fileprivate func trimming(_ character: Character) -> Substring {
        var text = Substring(self)
        while text.first == character { text.removeFirst() }
        while text.last == character { text.removeLast() }
        return text
    }
}
