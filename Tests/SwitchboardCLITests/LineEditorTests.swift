import SwitchboardCLI
import Testing

/// Applies `keys` in turn and returns the editor and the last key's action.
private func applying(_ keys: [LineEditor.Key], to start: LineEditor = LineEditor()) -> (LineEditor, LineEditor.Action?) {
    var editor = start
    var last: LineEditor.Action?
    for key in keys { last = editor.apply(key) }
    return (editor, last)
}

@Suite("The line editor: keys change the buffer and the cursor")
struct LineEditorTests {
    @Test("typed text goes in at the cursor, which moves past it")
    func insertAtCursor() {
        let (editor, action) = applying([.insert("user-meta st"), .left, .insert("e"), .end, .insert(" -")])
        #expect(editor.text == "user-meta set -")
        #expect(editor.cursor == 15)
        #expect(action == .redraw)
    }

    @Test("left and right stop at the ends of the line; a move that goes nowhere draws nothing")
    func cursorStopsAtEnds() {
        var editor = LineEditor(text: "ab")
        #expect(editor.apply(.right) == LineEditor.Action.none)
        #expect(editor.apply(.left) == .redraw)
        #expect(editor.apply(.left) == .redraw)
        #expect(editor.cursor == 0)
        #expect(editor.apply(.left) == LineEditor.Action.none)
        #expect(editor.cursor == 0)
    }

    @Test("home and end (Ctrl-A, Ctrl-E) go to the start and the end")
    func homeAndEnd() {
        var editor = LineEditor(text: "meta get")
        _ = editor.apply(.home)
        #expect(editor.cursor == 0)
        _ = editor.apply(.insert("user-"))
        #expect(editor.text == "user-meta get" && editor.cursor == 5)
        _ = editor.apply(.end)
        #expect(editor.cursor == 13)
    }

    @Test("backspace deletes before the cursor, delete under it; nothing to delete draws nothing")
    func backspaceAndDelete() {
        var editor = LineEditor(text: "abcd", cursor: 2)
        #expect(editor.apply(.backspace) == .redraw)
        #expect(editor.text == "acd" && editor.cursor == 1)
        #expect(editor.apply(.delete) == .redraw)
        #expect(editor.text == "ad" && editor.cursor == 1)
        _ = editor.apply(.home)
        #expect(editor.apply(.backspace) == LineEditor.Action.none)
        _ = editor.apply(.end)
        #expect(editor.apply(.delete) == LineEditor.Action.none)
        #expect(editor.text == "ad")
    }

    @Test("Ctrl-U deletes everything before the cursor, Ctrl-K everything from it on")
    func killToStartAndEnd() {
        var editor = LineEditor(text: "who-now lobby --state", cursor: 8)
        _ = editor.apply(.killToStart)
        #expect(editor.text == "lobby --state" && editor.cursor == 0)
        _ = editor.apply(.right)
        _ = editor.apply(.killToEnd)
        #expect(editor.text == "l" && editor.cursor == 1)
    }

    @Test("Ctrl-W deletes the word before the cursor and the blanks between them")
    func deleteWordBackward() {
        var editor = LineEditor(text: "state set lobby  ")
        _ = editor.apply(.deleteWordBackward)
        #expect(editor.text == "state set " && editor.cursor == 10)
        _ = editor.apply(.deleteWordBackward)
        #expect(editor.text == "state ")
        var middle = LineEditor(text: "state set lobby", cursor: 7)  // inside "set"
        _ = middle.apply(.deleteWordBackward)
        #expect(middle.text == "state et lobby" && middle.cursor == 6)
    }

    @Test("Alt-B and Alt-F move by words")
    func wordMoves() {
        var editor = LineEditor(text: "who-now  lobby --state")
        _ = editor.apply(.wordLeft)
        #expect(editor.cursor == 15)
        _ = editor.apply(.wordLeft)
        #expect(editor.cursor == 9)
        _ = editor.apply(.wordLeft)
        #expect(editor.cursor == 0)
        _ = editor.apply(.wordRight)
        #expect(editor.cursor == 7)
        _ = editor.apply(.wordRight)
        #expect(editor.cursor == 14)
    }

    @Test("Enter submits the line and empties the editor")
    func enterSubmits() {
        let (editor, action) = applying([.insert("where-now"), .home, .enter])
        #expect(action == .submit("where-now"))
        #expect(editor.text.isEmpty && editor.cursor == 0)
    }

    @Test("Ctrl-C abandons the line: it is cleared, not submitted")
    func interruptClears() {
        let (editor, action) = applying([.insert("who-now lob"), .interrupt])
        #expect(action == .cancel("who-now lob"))
        #expect(editor.text.isEmpty && editor.cursor == 0)
    }

    @Test("Ctrl-D ends the input on an empty line only; on a line it deletes under the cursor")
    func endOfInput() {
        var editor = LineEditor()
        #expect(editor.apply(.endOfInput) == .endOfInput)
        editor = LineEditor(text: "abc", cursor: 1)
        #expect(editor.apply(.endOfInput) == .redraw)
        #expect(editor.text == "ac")
        _ = editor.apply(.end)
        #expect(editor.apply(.endOfInput) == LineEditor.Action.none)
    }

    @Test("control characters in inserted text are dropped; multi-scalar characters count as one")
    func insertedText() {
        var editor = LineEditor()
        #expect(editor.apply(.insert("\t\u{7}")) == LineEditor.Action.none)
        _ = editor.apply(.insert("e\u{301}x🇫🇷"))  // é as e + combining accent, a flag of two scalars
        #expect(editor.buffer.count == 3 && editor.cursor == 3)
        _ = editor.apply(.backspace)
        #expect(editor.text == "e\u{301}x")
    }

    @Test("Up walks back through the history, Down forward, and past the newest brings the typed line back")
    func historyWalk() {
        var editor = LineEditor(history: ["user-meta get", "where-now", "who-now lobby"])
        _ = editor.apply(.insert("draft"))
        #expect(editor.apply(.historyPrevious) == .redraw)
        #expect(editor.text == "who-now lobby" && editor.cursor == 13)
        _ = editor.apply(.historyPrevious)
        _ = editor.apply(.historyPrevious)
        #expect(editor.text == "user-meta get" && editor.historyIndex == 0)
        #expect(editor.apply(.historyPrevious) == LineEditor.Action.none)  // no older entry
        _ = editor.apply(.historyNext)
        #expect(editor.text == "where-now")
        _ = editor.apply(.historyNext)
        _ = editor.apply(.historyNext)
        #expect(editor.text == "draft" && editor.historyIndex == nil)
        #expect(editor.apply(.historyNext) == LineEditor.Action.none)
    }

    @Test("a recalled entry can be edited and submitted; the history itself is unchanged")
    func editRecalledEntry() {
        let (editor, action) = applying(
            [.historyPrevious, .insert(" --state"), .enter], to: LineEditor(history: ["who-now lobby"]))
        #expect(action == .submit("who-now lobby --state"))
        #expect(editor.history == ["who-now lobby"])
        #expect(editor.historyIndex == nil)
    }

    @Test("Up on an empty history does nothing")
    func emptyHistory() {
        var editor = LineEditor(text: "x")
        #expect(editor.apply(.historyPrevious) == LineEditor.Action.none)
        #expect(editor.apply(.historyNext) == LineEditor.Action.none)
        #expect(editor.text == "x")
    }
}

@Suite("Terminal bytes decode to editor keys")
struct KeyDecoderTests {
    private func keys(_ bytes: [UInt8]) -> [LineEditor.Key] {
        var decoder = KeyDecoder()
        return decoder.decode(bytes)
    }

    @Test("control keys map to their editing functions")
    func controlKeys() {
        #expect(self.keys([0x01, 0x05, 0x02, 0x06, 0x15, 0x17, 0x0b, 0x03, 0x04, 0x7f, 0x08, 0x10, 0x0e, 0x0c, 0x09]) == [
            .home, .end, .left, .right, .killToStart, .deleteWordBackward, .killToEnd, .interrupt, .endOfInput,
            .backspace, .backspace, .historyPrevious, .historyNext, .clearScreen, .ignored,
        ])
    }

    @Test("xterm, Linux console and tmux sequences for arrows, Home, End and Delete")
    func escapeSequences() {
        let cases: [(String, LineEditor.Key)] = [
            ("\u{1B}[A", .historyPrevious), ("\u{1B}[B", .historyNext), ("\u{1B}[C", .right), ("\u{1B}[D", .left),
            ("\u{1B}OA", .historyPrevious), ("\u{1B}OD", .left), ("\u{1B}[H", .home), ("\u{1B}[F", .end),
            ("\u{1B}OH", .home), ("\u{1B}OF", .end), ("\u{1B}[1~", .home), ("\u{1B}[7~", .home), ("\u{1B}[4~", .end),
            ("\u{1B}[8~", .end), ("\u{1B}[3~", .delete), ("\u{1B}[1;5C", .wordRight), ("\u{1B}[1;5D", .wordLeft),
            ("\u{1B}[1;3D", .wordLeft), ("\u{1B}b", .wordLeft), ("\u{1B}f", .wordRight), ("\u{1B}\u{7F}", .deleteWordBackward),
            ("\u{1B}[15~", .ignored), ("\u{1B}[Z", .ignored),
        ]
        for (sequence, key) in cases {
            #expect(self.keys(Array(sequence.utf8)) == [key], "\(Array(sequence.utf8))")
        }
    }

    @Test("printable text, UTF-8 included, comes as one insert between other keys")
    func textRuns() {
        #expect(self.keys(Array("who-now\u{1B}[Dé😀\r".utf8)) == [.insert("who-now"), .left, .insert("é😀"), .enter])
    }

    @Test("a sequence or a character cut between two reads waits for its rest")
    func splitInput() {
        var decoder = KeyDecoder()
        #expect(decoder.decode([0x1b, UInt8(ascii: "[")]).isEmpty)
        #expect(decoder.hasPending)
        #expect(decoder.decode([UInt8(ascii: "1"), UInt8(ascii: ";")]).isEmpty)
        #expect(decoder.decode([UInt8(ascii: "5"), UInt8(ascii: "C"), UInt8(ascii: "x")]) == [.wordRight, .insert("x")])
        let euro = Array("€".utf8)
        #expect(decoder.decode(euro[0..<2]).isEmpty)
        #expect(decoder.decode(euro[2...]) == [.insert("€")])
        #expect(!decoder.hasPending)
    }

    @Test("a lone ESC waits, and is ignored when flushed")
    func loneEscape() {
        var decoder = KeyDecoder()
        #expect(decoder.decode([0x1b]).isEmpty)
        #expect(decoder.flush() == [.ignored])
        #expect(decoder.decode([UInt8(ascii: "a")]) == [.insert("a")])
    }

    @Test("a pasted CR LF is one Enter, even across reads; LF alone is Enter too")
    func carriageReturnLineFeed() {
        var decoder = KeyDecoder()
        #expect(decoder.decode(Array("a\r\nb\r".utf8)) == [.insert("a"), .enter, .insert("b"), .enter])
        #expect(decoder.decode([0x0a, 0x0a]) == [.enter])
    }

    @Test("invalid UTF-8 becomes a replacement character, not a stuck decoder")
    func invalidUTF8() {
        var decoder = KeyDecoder()
        #expect(decoder.decode([0xff, UInt8(ascii: "a")]) == [.insert("\u{FFFD}a")])
        #expect(decoder.decode([0xe2, UInt8(ascii: "b")]) == [.insert("\u{FFFD}b")])
    }
}

@Suite("The line renderer draws the prompt and line, wrapping rows, with the cursor in place")
struct LineRendererTests {
    @Test("a short line with the cursor at its end is the prompt and the text, nothing more")
    func cursorAtEnd() {
        let frame = LineRenderer(prompt: "sbctl> ", columns: 80).draw(LineEditor(text: "where-now"))
        #expect(frame.output == "sbctl> where-now")
        #expect(frame.cursorRow == 0)
    }

    @Test("a cursor inside the line goes back to the start of the row and right to its column")
    func cursorInside() {
        let frame = LineRenderer(prompt: "sbctl> ", columns: 80).draw(LineEditor(text: "user-meta get Tny", cursor: 15))
        #expect(frame.output == "sbctl> user-meta get Tny\r\u{1B}[22C")
        #expect(frame.cursorRow == 0)
        let atStart = LineRenderer(prompt: "", columns: 80).draw(LineEditor(text: "ab", cursor: 0))
        #expect(atStart.output == "ab\r")
    }

    @Test("a line longer than the terminal wraps; the cursor on an earlier row is reached by moving up")
    func wrappedLine() {
        // 4 + 10 = 14 columns on a 6-column terminal: rows 0-2, the end on row 2, column 2.
        let frame = LineRenderer(prompt: "sb> ", columns: 6).draw(LineEditor(text: "0123456789", cursor: 3))
        #expect(frame.output == "sb> 0123456789\u{1B}[1A\r\u{1B}[1C")
        #expect(frame.cursorRow == 1)
        #expect(LineRenderer.erase(cursorRow: frame.cursorRow) == "\u{1B}[1A\r\u{1B}[J")
    }

    @Test("a line that fills its last row exactly moves to the next row, so rows count the same everywhere")
    func exactFill() {
        let frame = LineRenderer(prompt: "sb> ", columns: 6).draw(LineEditor(text: "01234567"))
        #expect(frame.output == "sb> 01234567\r\n")
        #expect(frame.cursorRow == 2)
    }

    @Test("erasing from the first row goes to its start and clears down")
    func eraseFirstRow() {
        #expect(LineRenderer.erase(cursorRow: 0) == "\r\u{1B}[J")
    }

    @Test("wide characters take two columns, combining marks none")
    func widths() {
        #expect(LineRenderer.width(of: "abc") == 3)
        #expect(LineRenderer.width(of: "e\u{301}") == 1)
        #expect(LineRenderer.width(of: "日本") == 4)
        #expect(LineRenderer.width(of: "😀") == 2)
        let frame = LineRenderer(prompt: "> ", columns: 80).draw(LineEditor(text: "日本x", cursor: 2))
        #expect(frame.output == "> 日本x\r\u{1B}[6C")
    }
}
