import Foundation
import Histogram

/// The result of one run: named values in the order they were added, and the reasons the run is not valid.
///
/// A run with failures still prints all its numbers (they help to find out what broke), then the command exits
/// with status 1, so that scripts never take a broken run's figures for a measurement.
struct BenchReport {
    private(set) var fields: [(key: String, value: String)] = []
    private(set) var failures: [String] = []

    /// Adds a value; numbers are rendered as JSON numbers, everything else as strings.
    mutating func add(_ key: String, _ value: String) {
        self.fields.append((key, value))
    }

    mutating func add(_ key: String, _ value: Int) { self.add(key, "\(value)") }
    mutating func add(_ key: String, _ value: UInt64) { self.add(key, "\(value)") }

    /// Adds a value with a fixed number of decimals.
    mutating func add(_ key: String, _ value: Double, decimals: Int) {
        self.add(key, String(format: "%.\(decimals)f", value))
    }

    /// Adds `prefix_p50_us`, `_p90_us`, `_p99_us`, `_p999_us` and `_max_us` of a histogram of nanoseconds (without
    /// a prefix: `p50_us` ... `max_us`).
    mutating func addPercentiles(
        _ prefix: String, _ histogram: Histogram<UInt64>, percentiles: [Double] = [50, 90, 99, 99.9]
    ) {
        for p in percentiles {
            let name = p == p.rounded() ? "\(Int(p))" : String("\(p)".filter { $0 != "." })
            self.add(Self.key(prefix, "p\(name)_us"), Double(histogram.valueAtPercentile(p)) / 1000, decimals: 1)
        }
        self.add(Self.key(prefix, "max_us"), Double(histogram.totalCount == 0 ? 0 : histogram.maxRecorded) / 1000, decimals: 1)
    }

    private static func key(_ prefix: String, _ name: String) -> String {
        prefix.isEmpty ? name : "\(prefix)_\(name)"
    }

    /// Marks the run as broken.
    mutating func fail(_ reason: String) {
        self.failures.append(reason)
    }

    /// True when nothing marked the run as broken.
    var isValid: Bool { self.failures.isEmpty }

    /// The report as `key: value` lines, ending with `result: ok` or `result: FAILED (reasons)`.
    var text: String {
        var lines = self.fields.map { "\($0.key): \($0.value)" }
        lines.append(self.isValid ? "result: ok" : "result: FAILED (\(self.failures.joined(separator: "; ")))")
        return lines.joined(separator: "\n")
    }

    /// The report as one JSON object; `ok` tells whether the run is valid, `failures` lists why not.
    var json: String {
        var members = self.fields.map { "\(Self.quote($0.key)): \(Self.render($0.value))" }
        members.append("\"ok\": \(self.isValid)")
        members.append("\"failures\": [" + self.failures.map(Self.quote).joined(separator: ", ") + "]")
        return "{" + members.joined(separator: ", ") + "}"
    }

    private static func render(_ value: String) -> String {
        let isNumber = !value.isEmpty && value.allSatisfy { "0123456789.-e".contains($0) } && Double(value) != nil
        if isNumber { return value }
        return self.quote(value)
    }

    private static func quote(_ string: String) -> String {
        var quoted = "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": quoted += "\\\""
            case "\\": quoted += "\\\\"
            case "\n": quoted += "\\n"
            case _ where scalar.value < 0x20: quoted += String(format: "\\u%04x", scalar.value)
            default: quoted.unicodeScalars.append(scalar)
            }
        }
        return quoted + "\""
    }
}
