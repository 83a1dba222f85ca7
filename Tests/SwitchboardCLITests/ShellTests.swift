import Foundation
import SwitchboardCLI
import SwitchboardTestSupport
import Testing

@Suite("Shell lines split into words like a POSIX shell's")
struct ShellTokenizerTests {
    @Test("whitespace separates words; quotes and backslashes keep spaces")
    func quotingKeepsSpaces() throws {
        #expect(try ShellTokenizer.words("  user-meta set  Tony Name=Tony ") == ["user-meta", "set", "Tony", "Name=Tony"])
        #expect(try ShellTokenizer.words(#"state set lobby "note=two words" 'raw=$x \n' a\ b"#)
            == ["state", "set", "lobby", "note=two words", #"raw=$x \n"#, "a b"])
        #expect(try ShellTokenizer.words(#"call whoNow '{"channel": "lobby"}'"#) == ["call", "whoNow", #"{"channel": "lobby"}"#])
        #expect(try ShellTokenizer.words(#"x "a\"b\\c\d""#) == ["x", #"a"b\c\d"#])
        #expect(try ShellTokenizer.words("x '' y") == ["x", "", "y"])
    }

    @Test("a # at the start of a word begins a comment")
    func comments() throws {
        #expect(try ShellTokenizer.words("who-now lobby # who is there") == ["who-now", "lobby"])
        #expect(try ShellTokenizer.words("set k=#1") == ["set", "k=#1"])
        #expect(try ShellTokenizer.words("# only a comment").isEmpty)
    }

    @Test("an unterminated quote or a trailing backslash is a usage error")
    func unterminatedInput() {
        for line in [#"a "b"#, "a 'b", #"a \"#] {
            do {
                _ = try ShellTokenizer.words(line)
                Issue.record("\(line) was split")
            } catch {
                #expect(error.status == .usage)
            }
        }
    }
}

@Suite("Shell history is numbered, recalled with !N and kept in a file")
struct ShellHistoryTests {
    @Test("entries are numbered from 1 and recalled with !N, !-N, !! and !prefix")
    func recall() throws {
        var history = ShellHistory(path: nil)
        try history.add("user-meta set Tony a=1")
        try history.add("who-now lobby")
        try history.add("user-meta get Tony")
        #expect(try history.expand("!1") == "user-meta set Tony a=1")
        #expect(try history.expand("!-2") == "who-now lobby")
        #expect(try history.expand("!!") == "user-meta get Tony")
        #expect(try history.expand("!user") == "user-meta get Tony")
        #expect(try history.expand("who-now lobby") == nil)
        #expect(try history.expand("!") == nil)
        #expect(history.listing == ["  1  user-meta set Tony a=1", "  2  who-now lobby", "  3  user-meta get Tony"])
    }

    @Test("a reference to no entry is a data error")
    func missingReferences() {
        let history = ShellHistory(path: nil)
        for reference in ["!1", "!0", "!!", "!-1", "!who"] {
            do {
                _ = try history.expand(reference)
                Issue.record("\(reference) expanded")
            } catch {
                #expect(error.status == .dataError)
            }
        }
    }

    @Test("entries are appended to the file and read back by the next shell")
    func persistsAcrossSessions() throws {
        let history = TemporaryPath("sbctl-history")
        defer { history.remove() }
        let path = history.path
        var first = ShellHistory(path: path)
        try first.add("who-now lobby")
        try first.add("where-now")
        var second = ShellHistory(path: path)
        #expect(second.entries == ["who-now lobby", "where-now"])
        try second.add("logout")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "who-now lobby\nwhere-now\nlogout\n")
        #expect(try second.expand("!2") == "where-now")
    }

    @Test("the history keeps its last entries, and the file is cut back to them")
    func boundedHistory() throws {
        let history = TemporaryPath("sbctl-history")
        defer { history.remove() }
        let path = history.path
        try (1...7).map { "old \($0)\n" }.joined().write(toFile: path, atomically: true, encoding: .utf8)
        var shell = ShellHistory(path: path, limit: 3)
        #expect(shell.entries == ["old 5", "old 6", "old 7"])
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "old 5\nold 6\nold 7\n")
        for number in 1...3 { try shell.add("new \(number)") }
        #expect(shell.entries == ["new 1", "new 2", "new 3"])
        // Appends take the file to twice the limit before it is cut back.
        #expect(try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").count == 6)
        try shell.add("new 4")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "new 2\nnew 3\nnew 4\n")
        #expect(try shell.expand("!1") == "new 2")
    }

    @Test("the history file is $SBCTL_HISTORY, else ~/.sbctl_history; empty means memory only")
    func historyPath() {
        #expect(ShellHistory.path(environment: ["SBCTL_HISTORY": "/tmp/h", "HOME": "/home/a"]) == "/tmp/h")
        #expect(ShellHistory.path(environment: ["HOME": "/home/a"]) == "/home/a/.sbctl_history")
        #expect(ShellHistory.path(environment: ["SBCTL_HISTORY": "", "HOME": "/home/a"]) == nil)
    }
}
