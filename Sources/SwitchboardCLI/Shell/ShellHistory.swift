#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// The shell's command history: kept in memory and appended to a file (`~/.sbctl_history`, or `$SBCTL_HISTORY`;
/// an empty `$SBCTL_HISTORY` keeps it in memory only).
///
/// Entries are numbered from 1, the file's earlier entries first. `!N` re-runs entry N, `!-N` the N-th last,
/// `!!` the last one and `!text` the last one starting with text; on a terminal, Up and Down walk them.
///
/// Both are bounded: the history keeps its last ``limit`` entries, and the file is cut back to them (rewritten
/// whole, by a rename) when a shell starts with more in it, or once a shell's appends take it past twice as many.
public struct ShellHistory: Sendable {
    /// Entries kept at most.
    public static let limit = 1000

    /// Every entry, oldest first.
    public private(set) var entries: [String] = []
    /// The history file, if any.
    public let path: String?
    /// The entries the file holds (as far as this shell knows: others may append too).
    private var linesInFile = 0
    private let limit: Int

    /// The history file sbctl uses in `environment`: `$SBCTL_HISTORY`, else `$HOME/.sbctl_history`.
    public static func path(environment: [String: String]) -> String? {
        if let path = environment["SBCTL_HISTORY"] { return path.isEmpty ? nil : path }
        guard let home = environment["HOME"], !home.isEmpty else { return nil }
        return (home as NSString).appendingPathComponent(".sbctl_history")
    }

    /// A history backed by `path`, starting with the last `limit` entries the file holds (a missing file is an
    /// empty history); a file with more is cut back to them.
    public init(path: String?, limit: Int = ShellHistory.limit) {
        self.path = path
        self.limit = max(1, limit)
        let lines = Self.read(path)
        self.entries = Array(lines.suffix(self.limit))
        self.linesInFile = lines.count
        if lines.count > self.limit { self.compact() }
    }

    /// Adds an entry and appends it to the file.
    ///
    /// - Throws: ``CommandFailure`` (ioError) when the file cannot be written; the entry is kept in memory anyway.
    public mutating func add(_ line: String) throws(CommandFailure) {
        self.entries.append(line)
        if self.entries.count > self.limit { self.entries.removeFirst(self.entries.count - self.limit) }
        guard let path = self.path else { return }
        let data = Data((line + "\n").utf8)
        if !FileManager.default.fileExists(atPath: path) {
            guard FileManager.default.createFile(atPath: path, contents: data, attributes: [.posixPermissions: 0o600])
            else { throw .ioError("cannot create the history file \(path)") }
            self.linesInFile = 1
            return
        }
        do {
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            defer { try? handle.close() }
            try handle.seekToEnd()
            try handle.write(contentsOf: data)
        } catch {
            throw .ioError("cannot write the history file \(path): \(error.localizedDescription)")
        }
        self.linesInFile += 1
        if self.linesInFile > 2 * self.limit { self.compact() }
    }

    /// The non-empty lines of the file at `path` (none when there is no file).
    private static func read(_ path: String?) -> [String] {
        guard let path, let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
        return text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
    }

    /// Rewrites the file with its last ``limit`` lines (read again: another shell may have appended), through a
    /// temporary file renamed over it. A failure leaves the file as it was.
    private mutating func compact() {
        guard let path = self.path else { return }
        let kept = Self.read(path).suffix(self.limit)
        let temporary = path + ".\(getpid()).tmp"
        let data = Data(kept.map { $0 + "\n" }.joined().utf8)
        guard FileManager.default.createFile(atPath: temporary, contents: data, attributes: [.posixPermissions: 0o600])
        else { return }
        guard rename(temporary, path) == 0 else {
            unlink(temporary)
            return
        }
        self.linesInFile = kept.count
    }

    /// The line a history reference (`!N`, `!-N`, `!!`, `!text`) stands for, or nil when `line` is not one.
    ///
    /// - Throws: ``CommandFailure`` (dataError) for a reference to no entry.
    public func expand(_ line: String) throws(CommandFailure) -> String? {
        guard line.hasPrefix("!"), line.count > 1 else { return nil }
        let reference = line.dropFirst()
        if reference == "!" {
            guard let last = self.entries.last else { throw .dataError("!!: the history is empty") }
            return last
        }
        if let number = Int(reference) {
            let index = number > 0 ? number - 1 : self.entries.count + number
            guard number != 0, self.entries.indices.contains(index) else {
                throw .dataError("!\(reference): no such history entry (1-\(self.entries.count))")
            }
            return self.entries[index]
        }
        guard let match = self.entries.last(where: { $0.hasPrefix(reference) }) else {
            throw .dataError("!\(reference): no history entry starts with '\(reference)'")
        }
        return match
    }

    /// The numbered listing the `history` builtin prints.
    public var listing: [String] {
        let width = String(self.entries.count).count
        return self.entries.enumerated().map { index, entry in
            let number = String(index + 1)
            return String(repeating: " ", count: width - number.count + 2) + number + "  " + entry
        }
    }
}
