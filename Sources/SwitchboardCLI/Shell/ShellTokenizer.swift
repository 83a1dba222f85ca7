/// Splits a shell line into words the way a POSIX shell would for plain words: whitespace separates words,
/// `'...'` keeps everything literally, `"..."` keeps everything but `\"` and `\\`, a backslash outside quotes keeps
/// the next character, and `#` at the start of a word begins a comment.
public enum ShellTokenizer {
    /// The words of `line`.
    ///
    /// - Throws: ``CommandFailure`` (usage) for an unterminated quote or a trailing backslash.
    public static func words(_ line: String) throws(CommandFailure) -> [String] {
        var words: [String] = []
        var current = ""
        var inWord = false
        var characters = line.makeIterator()
        while let character = characters.next() {
            switch character {
            case " ", "\t", "\r", "\n":
                if inWord { words.append(current) }
                current = ""
                inWord = false
            case "#" where !inWord:
                return words
            case "'":
                inWord = true
                while true {
                    guard let next = characters.next() else { throw .usage("unterminated ' quote") }
                    if next == "'" { break }
                    current.append(next)
                }
            case "\"":
                inWord = true
                while true {
                    guard let next = characters.next() else { throw .usage("unterminated \" quote") }
                    if next == "\"" { break }
                    if next == "\\" {
                        guard let escaped = characters.next() else { throw .usage("unterminated \" quote") }
                        if escaped != "\"" && escaped != "\\" { current.append("\\") }
                        current.append(escaped)
                    } else {
                        current.append(next)
                    }
                }
            case "\\":
                guard let escaped = characters.next() else { throw .usage("a line may not end with \\") }
                inWord = true
                current.append(escaped)
            default:
                inWord = true
                current.append(character)
            }
        }
        if inWord { words.append(current) }
        return words
    }
}
