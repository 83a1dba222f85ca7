/// The state of the line being typed at the shell's prompt, and what each key does to it: a pure value, no terminal.
///
/// ``apply(_:)`` takes one ``Key`` and returns what the reader has to do (redraw, submit the line, clear it, end the
/// input). The editor also walks the history with ``Key/historyPrevious`` and ``Key/historyNext``: the line being
/// typed is kept aside while older entries are shown, and comes back below the newest one.
///
/// The buffer holds `Character`s (grapheme clusters), so the cursor never lands inside an accented letter or an
/// emoji; ``cursor`` counts characters before it.
public struct LineEditor: Sendable, Equatable {
    /// A key the editor understands, as ``KeyDecoder`` produces them from a terminal's bytes.
    public enum Key: Sendable, Equatable {
        /// Text to insert at the cursor (one typed character, or a pasted run of them).
        case insert(String)
        /// Left arrow, Ctrl-B: one character left.
        case left
        /// Right arrow, Ctrl-F: one character right.
        case right
        /// Alt-B, Ctrl-Left: to the start of the word before the cursor.
        case wordLeft
        /// Alt-F, Ctrl-Right: to the end of the word after the cursor.
        case wordRight
        /// Home, Ctrl-A: to the start of the line.
        case home
        /// End, Ctrl-E: to the end of the line.
        case end
        /// Backspace, Ctrl-H: delete the character before the cursor.
        case backspace
        /// Delete: delete the character under the cursor.
        case delete
        /// Ctrl-U: delete everything before the cursor.
        case killToStart
        /// Ctrl-K: delete everything from the cursor on.
        case killToEnd
        /// Ctrl-W: delete the word before the cursor (and the blanks between it and the cursor).
        case deleteWordBackward
        /// Up arrow, Ctrl-P: the previous (older) history entry.
        case historyPrevious
        /// Down arrow, Ctrl-N: the next (newer) history entry, and after the newest the line that was being typed.
        case historyNext
        /// Enter: run the line.
        case enter
        /// Ctrl-C: abandon the line.
        case interrupt
        /// Ctrl-D: the end of input on an empty line, else like Delete.
        case endOfInput
        /// Ctrl-L: clear the screen and draw the line again at its top.
        case clearScreen
        /// A key without a meaning here (Tab, F1, an unknown escape sequence): ignored.
        case ignored
    }

    /// What the reader does after a key.
    public enum Action: Sendable, Equatable {
        /// Draw the line again (the buffer or the cursor changed).
        case redraw
        /// Nothing changed (a key at the end of the line that moves right, an unknown key): nothing to draw.
        case none
        /// The line is done: run it. The editor is empty again, ready for the next line.
        case submit(String)
        /// The line was abandoned with Ctrl-C (what it held, for the screen). The editor is empty again.
        case cancel(String)
        /// Ctrl-D on an empty line: the user is done.
        case endOfInput
        /// Clear the screen, then draw the line.
        case clearScreen
    }

    /// The line's characters.
    public private(set) var buffer: [Character] = []
    /// How many characters are before the cursor (0...buffer.count).
    public private(set) var cursor = 0
    /// The history, oldest first, that Up and Down walk.
    public private(set) var history: [String]
    /// The history entry shown (an index into ``history``), or nil while the line being typed is shown.
    public private(set) var historyIndex: Int?
    /// The line being typed, kept while a history entry is shown.
    private var draft: [Character] = []

    /// An empty line with `history` (oldest first) to walk.
    public init(history: [String] = []) {
        self.history = history
    }

    /// An editor holding `text` with the cursor at `cursor` (its end when nil): for tests and for drawing.
    public init(text: String, cursor: Int? = nil, history: [String] = []) {
        self.buffer = Array(text)
        self.cursor = min(max(0, cursor ?? self.buffer.count), self.buffer.count)
        self.history = history
    }

    /// The line as text.
    public var text: String { String(self.buffer) }

    /// Applies one key and says what the reader has to do.
    public mutating func apply(_ key: Key) -> Action {
        switch key {
        case .insert(let text):
            let characters = text.filter { !$0.isControlCharacter }
            guard !characters.isEmpty else { return .none }
            self.buffer.insert(contentsOf: characters, at: self.cursor)
            self.cursor += characters.count
            return .redraw
        case .left:
            return self.moveCursor(to: self.cursor - 1)
        case .right:
            return self.moveCursor(to: self.cursor + 1)
        case .wordLeft:
            return self.moveCursor(to: self.startOfWord(before: self.cursor))
        case .wordRight:
            return self.moveCursor(to: self.endOfWord(after: self.cursor))
        case .home:
            return self.moveCursor(to: 0)
        case .end:
            return self.moveCursor(to: self.buffer.count)
        case .backspace:
            return self.deleteRange(self.cursor - 1, self.cursor)
        case .delete:
            return self.deleteRange(self.cursor, self.cursor + 1)
        case .killToStart:
            return self.deleteRange(0, self.cursor)
        case .killToEnd:
            return self.deleteRange(self.cursor, self.buffer.count)
        case .deleteWordBackward:
            return self.deleteRange(self.startOfWord(before: self.cursor), self.cursor)
        case .historyPrevious:
            let index = (self.historyIndex ?? self.history.count) - 1
            guard index >= 0 else { return .none }
            return self.showHistory(index)
        case .historyNext:
            guard let index = self.historyIndex else { return .none }
            return self.showHistory(index + 1 < self.history.count ? index + 1 : nil)
        case .enter:
            let line = self.text
            self.reset()
            return .submit(line)
        case .interrupt:
            let line = self.text
            self.reset()
            return .cancel(line)
        case .endOfInput:
            guard self.buffer.isEmpty else { return self.deleteRange(self.cursor, self.cursor + 1) }
            return .endOfInput
        case .clearScreen:
            return .clearScreen
        case .ignored:
            return .none
        }
    }

    private mutating func reset() {
        self.buffer = []
        self.cursor = 0
        self.draft = []
        self.historyIndex = nil
    }

    private mutating func moveCursor(to position: Int) -> Action {
        let position = min(max(0, position), self.buffer.count)
        guard position != self.cursor else { return .none }
        self.cursor = position
        return .redraw
    }

    /// Deletes the characters in `start..<end` (clamped to the buffer); the cursor goes to `start`.
    private mutating func deleteRange(_ start: Int, _ end: Int) -> Action {
        let start = max(0, start)
        let end = min(end, self.buffer.count)
        guard start < end else { return .none }
        self.buffer.removeSubrange(start..<end)
        self.cursor = start
        return .redraw
    }

    /// Shows history entry `index`, or the draft when nil; the cursor goes to the end.
    private mutating func showHistory(_ index: Int?) -> Action {
        if self.historyIndex == nil { self.draft = self.buffer }
        self.historyIndex = index
        self.buffer = index.map { Array(self.history[$0]) } ?? self.draft
        self.cursor = self.buffer.count
        return .redraw
    }

    /// The start of the word the cursor is in or after: back over blanks, then over the word.
    private func startOfWord(before position: Int) -> Int {
        var index = position
        while index > 0, self.buffer[index - 1].isWhitespace { index -= 1 }
        while index > 0, !self.buffer[index - 1].isWhitespace { index -= 1 }
        return index
    }

    /// The end of the word the cursor is in or before: forward over blanks, then over the word.
    private func endOfWord(after position: Int) -> Int {
        var index = position
        while index < self.buffer.count, self.buffer[index].isWhitespace { index += 1 }
        while index < self.buffer.count, !self.buffer[index].isWhitespace { index += 1 }
        return index
    }
}

extension Character {
    /// Whether this is a C0 or C1 control character or DEL (never inserted into a line).
    var isControlCharacter: Bool {
        self.unicodeScalars.allSatisfy { $0.value < 0x20 || (0x7f...0x9f).contains($0.value) }
    }
}
