import Foundation

/// Paths of this checkout and of the build the tests run from.
enum Repository {
    /// The package's root directory.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// `relative` under the package's root.
    static func path(_ relative: String) -> String { Self.root.appendingPathComponent(relative).path }

    /// The text of the file at `relative` under the package's root.
    static func text(_ relative: String) throws -> String { try String(contentsOfFile: Self.path(relative), encoding: .utf8) }

    /// The products `swift build --build-tests` put next to the test bundle (`switchboard`, `switchboard-quickstart`).
    static func executable(_ name: String) -> String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name).path
    }

    /// The Swift source files under `relative` (recursively), as paths relative to the package's root, sorted.
    static func swiftFiles(under relative: String) -> [String] {
        let enumerator = FileManager.default.enumerator(atPath: Self.path(relative))
        var files: [String] = []
        while let file = enumerator?.nextObject() as? String {
            if file.hasSuffix(".swift") { files.append(relative + "/" + file) }
        }
        return files.sorted()
    }
}
