/// Turns the bytes a terminal sends in raw mode into ``LineEditor/Key``s: a pure value, fed chunk by chunk.
///
/// It knows the control keys of Emacs-style line editing (Ctrl-A, Ctrl-E, Ctrl-U, Ctrl-W...), the escape sequences
/// xterm, the Linux console, screen and tmux send for the arrows, Home, End and Delete (`ESC [ C`, `ESC O H`,
/// `ESC [ 1 ~`, `ESC [ 1 ; 5 C`...), Alt-B and Alt-F, and UTF-8 text. A sequence or a character cut between two
/// chunks waits for the rest; a lone ESC with nothing after it waits until ``flush()`` (the reader calls it when
/// no more bytes come for a moment) and is then ignored.
public struct KeyDecoder: Sendable, Equatable {
    private var pending: [UInt8] = []
    /// Whether the last byte was a carriage return, so that the line feed of a pasted CR LF is not a second Enter.
    private var afterCarriageReturn = false

    /// A decoder with nothing pending.
    public init() {}

    /// Whether bytes of an unfinished sequence or character are waiting for more.
    public var hasPending: Bool { !self.pending.isEmpty }

    /// The keys `bytes` complete, in order.
    public mutating func decode(_ bytes: some Sequence<UInt8>) -> [LineEditor.Key] {
        self.pending.append(contentsOf: bytes)
        var keys: [LineEditor.Key] = []
        var index = 0
        let input = self.pending
        while index < input.count {
            guard let (key, length) = Self.key(at: index, in: input) else { break }  // incomplete: wait for more
            index += length
            if key == .enter, input[index - length] == 0x0a, self.afterCarriageReturn {
                self.afterCarriageReturn = false
                continue
            }
            self.afterCarriageReturn = length == 1 && input[index - 1] == 0x0d
            if case .insert(let text) = key, case .insert(let previous)? = keys.last {
                keys[keys.count - 1] = .insert(previous + text)
            } else {
                keys.append(key)
            }
        }
        self.pending.removeFirst(index)
        return keys
    }

    /// Ends whatever is pending: a lone ESC (or an unfinished sequence) is ignored, an unfinished UTF-8 character
    /// becomes U+FFFD.
    public mutating func flush() -> [LineEditor.Key] {
        guard !self.pending.isEmpty else { return [] }
        let bytes = self.pending
        self.pending = []
        if bytes[0] == 0x1b { return [.ignored] }
        return [.insert(String(decoding: bytes, as: UTF8.self))]
    }

    /// The key starting at `index` and how many bytes it took, or nil when `bytes` end before it does.
    private static func key(at index: Int, in bytes: [UInt8]) -> (LineEditor.Key, Int)? {
        let byte = bytes[index]
        switch byte {
        case 0x1b:
            return Self.escapeSequence(at: index, in: bytes)
        case 0x00..<0x20, 0x7f:
            return (Self.controlKey(byte), 1)
        case 0x80...:
            // One UTF-8 character; a stray continuation byte or an invalid lead byte is one replacement character.
            let length = Self.utf8Length(lead: byte)
            guard length > 1 else { return (.insert("\u{FFFD}"), 1) }
            guard index + length <= bytes.count else {
                // Wait for the rest, unless what is there already cannot be the start of a character.
                let available = bytes[(index + 1)...]
                if available.allSatisfy({ $0 & 0xc0 == 0x80 }) { return nil }
                return (.insert("\u{FFFD}"), 1)
            }
            return (.insert(String(decoding: bytes[index..<(index + length)], as: UTF8.self)), length)
        default:
            return (.insert(String(UnicodeScalar(byte))), 1)
        }
    }

    /// The length of the UTF-8 sequence `lead` starts (1 for a byte that cannot start one).
    private static func utf8Length(lead: UInt8) -> Int {
        switch lead {
        case 0xc2...0xdf: return 2
        case 0xe0...0xef: return 3
        case 0xf0...0xf4: return 4
        default: return 1
        }
    }

    private static func controlKey(_ byte: UInt8) -> LineEditor.Key {
        switch byte {
        case 0x01: return .home  // Ctrl-A
        case 0x02: return .left  // Ctrl-B
        case 0x03: return .interrupt  // Ctrl-C
        case 0x04: return .endOfInput  // Ctrl-D
        case 0x05: return .end  // Ctrl-E
        case 0x06: return .right  // Ctrl-F
        case 0x08, 0x7f: return .backspace  // Ctrl-H, DEL (the Backspace key)
        case 0x0a, 0x0d: return .enter  // Ctrl-J, Ctrl-M
        case 0x0b: return .killToEnd  // Ctrl-K
        case 0x0c: return .clearScreen  // Ctrl-L
        case 0x0e: return .historyNext  // Ctrl-N
        case 0x10: return .historyPrevious  // Ctrl-P
        case 0x15: return .killToStart  // Ctrl-U
        case 0x17: return .deleteWordBackward  // Ctrl-W
        default: return .ignored
        }
    }

    /// An escape sequence at `index` (which holds ESC): CSI (`ESC [`), SS3 (`ESC O`) or an Alt key.
    private static func escapeSequence(at index: Int, in bytes: [UInt8]) -> (LineEditor.Key, Int)? {
        guard index + 1 < bytes.count else { return nil }
        let introducer = bytes[index + 1]
        switch introducer {
        case UInt8(ascii: "["):
            // Parameters (digits and ';') up to a final byte 0x40-0x7e.
            var end = index + 2
            while end < bytes.count, !(0x40...0x7e).contains(bytes[end]) {
                guard (0x20...0x3f).contains(bytes[end]) else { return (.ignored, end - index) }  // broken: drop it
                end += 1
            }
            guard end < bytes.count else { return nil }
            let parameters = String(decoding: bytes[(index + 2)..<end], as: UTF8.self)
                .split(separator: ";", omittingEmptySubsequences: false).map { Int($0) }
            return (Self.csiKey(final: bytes[end], parameters: parameters), end - index + 1)
        case UInt8(ascii: "O"):
            guard index + 2 < bytes.count else { return nil }
            return (Self.csiKey(final: bytes[index + 2], parameters: []), 3)
        case UInt8(ascii: "b"), UInt8(ascii: "B"):
            return (.wordLeft, 2)
        case UInt8(ascii: "f"), UInt8(ascii: "F"):
            return (.wordRight, 2)
        case 0x7f, 0x08:
            return (.deleteWordBackward, 2)  // Alt-Backspace
        case 0x1b:
            return (.ignored, 1)  // ESC ESC: the first is a lone ESC
        default:
            return (.ignored, 2)
        }
    }

    /// The key of a CSI or SS3 sequence ending in `final`, with its numeric parameters.
    private static func csiKey(final: UInt8, parameters: [Int?]) -> LineEditor.Key {
        // A modifier parameter (`1;5C`: Ctrl, `1;3C`: Alt) turns the horizontal arrows into word moves.
        let modified = parameters.count >= 2 && (parameters[1] ?? 1) > 1
        switch final {
        case UInt8(ascii: "A"): return .historyPrevious
        case UInt8(ascii: "B"): return .historyNext
        case UInt8(ascii: "C"): return modified ? .wordRight : .right
        case UInt8(ascii: "D"): return modified ? .wordLeft : .left
        case UInt8(ascii: "H"): return .home
        case UInt8(ascii: "F"): return .end
        case UInt8(ascii: "~"):
            switch parameters.first ?? nil {
            case 1, 7: return .home
            case 4, 8: return .end
            case 3: return .delete
            default: return .ignored
            }
        default: return .ignored
        }
    }
}
