import Foundation

/// The shell's command history: kept in memory and appended to a file (`~/.sbctl_history`, or `$SBCTL_HISTORY`;
/// an empty `$SBCTL_HISTORY` keeps it in memory only).
///
/// Entries are numbered from 1, the file's earlier entries first. `!N` re-runs entry N, `!-N` the N-th last,
/// `!!` the last one and `!text` the last one starting with `text`.
public struct ShellHistory: Sendable {
    /// Entries kept at most; older ones are dropped when the file is read.
    public static let limit = 1000

    /// Every entry, oldest first.
    public private(set) var entries: [String] = []
    /// The history file, if any.
    public let path: String?

    /// The history file sbctl uses in `environment`: `$SBCTL_HISTORY`, else `$HOME/.sbctl_history`.
    public static func path(environment: [String: String]) -> String? {
        if let path = environment["SBCTL_HISTORY"] { return path.isEmpty ? nil : path }
        guard let home = environment["HOME"], !home.isEmpty else { return nil }
        return (home as NSString).appendingPathComponent(".sbctl_history")
    }

    /// A history backed by `path`, starting with the entries the file holds (a missing file is an empty history).
    public init(path: String?) {
        self.path = path
        guard let path, let text = try? String(contentsOfFile: path, encoding: .utf8) else { return }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
        self.entries = Array(lines.suffix(Self.limit))
    }

    /// Adds an entry and appends it to the file.
    ///
    /// - Throws: ``CommandFailure`` (ioError) when the file cannot be written; the entry is kept in memory anyway.
    public mutating func add(_ line: String) throws(CommandFailure) {
        self.entries.append(line)
        guard let path = self.path else { return }
        let data = Data((line + "\n").utf8)
        if !FileManager.default.fileExists(atPath: path) {
            guard FileManager.default.createFile(atPath: path, contents: data, attributes: [.posixPermissions: 0o600])
            else { throw .ioError("cannot create the history file \(path)") }
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
