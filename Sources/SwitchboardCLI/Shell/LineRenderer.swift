/// What to write to a terminal to show the prompt and the line being edited, with the cursor where the editor has
/// it: a pure function of the prompt, the editor and the terminal's width.
///
/// A line longer than the terminal is wide wraps onto more rows, so the renderer counts rows: ``draw(_:)`` starts at
/// column 0 of an empty row and says on which row (counted from the line's first) it leaves the cursor, and
/// ``erase(cursorRow:)`` goes back from there to the first row and clears everything below. Redrawing after a key is
/// `erase` then `draw`; a push printed while the user types is `erase`, the push, then `draw`.
public struct LineRenderer: Sendable, Equatable {
    /// The prompt before the line, e.g. `sbctl> `.
    public var prompt: String
    /// The terminal's width in columns (at least 1).
    public var columns: Int

    /// A renderer for `prompt` on a terminal `columns` wide.
    public init(prompt: String, columns: Int) {
        self.prompt = prompt
        self.columns = max(1, columns)
    }

    /// What ``draw(_:)`` produces.
    public struct Frame: Sendable, Equatable {
        /// The bytes to write, as text (escape sequences included).
        public var output: String
        /// The row the cursor is left on, counted from the prompt's row (0).
        public var cursorRow: Int
    }

    /// Draws the prompt and the line from column 0 of an empty row, then puts the cursor where the editor has it.
    public func draw(_ editor: LineEditor) -> Frame {
        let promptWidth = Self.width(of: self.prompt)
        let total = promptWidth + Self.width(of: editor.buffer[...])
        var output = self.prompt + editor.text
        // A line that fills its last row exactly leaves the cursor in the terminal's pending-wrap state; a new line
        // puts it at the start of the next row, so that the rows below can be counted the same way on every
        // terminal.
        if total > 0 && total % self.columns == 0 { output += "\r\n" }
        let endRow = total / self.columns
        let cursorPosition = promptWidth + Self.width(of: editor.buffer[..<editor.cursor])
        let cursorRow = cursorPosition / self.columns
        let cursorColumn = cursorPosition % self.columns
        if endRow > cursorRow { output += "\u{1B}[\(endRow - cursorRow)A" }
        if endRow > cursorRow || cursorColumn != total % self.columns {
            output += "\r"
            if cursorColumn > 0 { output += "\u{1B}[\(cursorColumn)C" }
        }
        return Frame(output: output, cursorRow: cursorRow)
    }

    /// Goes from the cursor on `cursorRow` of a drawn line back to column 0 of its first row and clears the screen
    /// from there down.
    public static func erase(cursorRow: Int) -> String {
        (cursorRow > 0 ? "\u{1B}[\(cursorRow)A" : "") + "\r\u{1B}[J"
    }

    /// Clears the whole screen and puts the cursor in its top left corner.
    public static let clearScreen = "\u{1B}[H\u{1B}[2J"

    /// The columns `text` takes on a terminal: 0 for combining marks and other zero-width characters, 2 for wide
    /// East Asian characters and emoji, 1 for the rest.
    public static func width(of text: some StringProtocol) -> Int {
        text.reduce(0) { $0 + Self.width(of: $1) }
    }

    /// The columns a run of characters takes: the sum of their widths.
    public static func width(of characters: ArraySlice<Character>) -> Int {
        characters.reduce(0) { $0 + Self.width(of: $1) }
    }

    /// The columns one character takes: its first scalar's width (what follows it combines with it).
    public static func width(of character: Character) -> Int {
        guard let scalar = character.unicodeScalars.first else { return 0 }
        if scalar.value < 0x7f { return scalar.value < 0x20 ? 0 : 1 }
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format, .control: return 0
        default: break
        }
        if scalar.properties.isEmojiPresentation || character.unicodeScalars.contains(where: { $0.value == 0xFE0F }) {
            return 2
        }
        return Self.isWide(scalar.value) ? 2 : 1
    }

    /// Whether a code point is East Asian Wide or Fullwidth (the blocks terminals draw two columns wide).
    private static func isWide(_ value: UInt32) -> Bool {
        switch value {
        case 0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
            0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x20000...0x2FFFD,
            0x30000...0x3FFFD:
            return true
        default:
            return false
        }
    }
}
