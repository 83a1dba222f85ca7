import ArgumentParser
import Foundation
import SwitchboardServer

/// Reads `--default-grants` (`Protocol/SPEC.md` §5.10): a grants claim as JSON text, or `@PATH` of a file holding
/// it. A value that cannot be read or is not a valid claim stops the start (exit status 64) with the reason.
enum DefaultGrantsLoader {
    /// The grant set `value` describes.
    ///
    /// - Throws: `ValidationError` naming the option and what is wrong (the file, the JSON, the grant).
    static func load(_ value: String) throws -> GrantSet {
        var text = value
        var origin = "--default-grants"
        if value.hasPrefix("@") {
            let path = String(value.dropFirst())
            origin = "--default-grants file \(path)"
            do {
                text = try String(contentsOfFile: path, encoding: .utf8)
            } catch {
                throw ValidationError("\(origin) cannot be read: \(error.localizedDescription)")
            }
        }
        do {
            return try GrantSet(jsonText: text)
        } catch {
            throw ValidationError("\(origin): \(error.description)")
        }
    }
}
