import Foundation
import Testing

/// What keeps the client's modules buildable on Apple platforms although only Linux builds them here: the C library
/// is imported in one file per module, under `#if canImport` for Darwin, Glibc and Musl alike; nothing else the
/// modules import is platform-specific, and no Linux-only call or constant appears.
@Suite struct PlatformImportTests {
    /// The modules the client's product is made of, each with what its files may import and the one file that may
    /// import the C library.
    static let modules: [(directory: String, imports: Set<String>, libcShim: String)] = [
        ("Sources/SwitchboardWire", ["CSwitchboardZlib", "NIOCore"], "Sources/SwitchboardWire/Primitives/UTF8Order.swift"),
        (
            "Sources/SwitchboardClient",
            ["SwitchboardWire", "NIOCore", "NIOPosix", "NIOSSL", "NIOTLS", "Logging", "ServiceLifecycle", "Synchronization"],
            "Sources/SwitchboardClient/LibC.swift"
        ),
    ]

    @Test func theClientModulesImportTheCLibraryOnlyConditionallyInTheirShimAndNothingLinuxOnly() throws {
        var checked = 0
        for module in Self.modules {
            let files = Repository.swiftFiles(under: module.directory)
            #expect(files.count > 5, "no sources found under \(module.directory)")
            for file in files {
                let problems = SourcePortability.problems(
                    in: try Repository.text(file), allowedImports: module.imports, mayImportLibC: file == module.libcShim)
                #expect(problems.isEmpty, "\(file): \(problems.joined(separator: "; "))")
                checked += 1
            }
            #expect(SourcePortability.libcImports(in: try Repository.text(module.libcShim)) == ["Darwin", "Glibc", "Musl"])
        }
        #expect(checked > 40)
    }

    @Test func theZlibShimIncludesOnlyZlib() throws {
        for file in ["Sources/CSwitchboardZlib/shim.c", "Sources/CSwitchboardZlib/include/CSwitchboardZlib.h"] {
            let includes = try Repository.text(file).split(separator: "\n").filter { $0.hasPrefix("#include") }
            #expect(!includes.isEmpty)
            for line in includes {
                #expect(line == "#include <zlib.h>" || line == "#include \"CSwitchboardZlib.h\"", "\(file): \(line)")
            }
        }
    }

    @Test func anUnconditionalOrOneSidedCLibraryImportIsCaught() {
        let allowed: Set<String> = ["NIOCore"]
        #expect(!SourcePortability.problems(in: "import Glibc\nimport NIOCore\n", allowedImports: allowed, mayImportLibC: true).isEmpty)
        #expect(!SourcePortability.problems(in: "@preconcurrency import Darwin\n", allowedImports: allowed, mayImportLibC: true).isEmpty)
        let linuxOnly = "#if canImport(Glibc)\nimport Glibc\n#endif\n"
        #expect(!SourcePortability.problems(in: linuxOnly, allowedImports: allowed, mayImportLibC: true).isEmpty)
        let wrongBranch = "#if canImport(Darwin)\nimport Glibc\n#elseif canImport(Glibc)\nimport Darwin\n#elseif canImport(Musl)\nimport Musl\n#endif\n"
        #expect(!SourcePortability.problems(in: wrongBranch, allowedImports: allowed, mayImportLibC: true).isEmpty)
        let everywhere = "#if canImport(Darwin)\nimport Darwin\n#elseif canImport(Glibc)\nimport Glibc\n#elseif canImport(Musl)\nimport Musl\n#endif\n"
        #expect(SourcePortability.problems(in: everywhere, allowedImports: allowed, mayImportLibC: true).isEmpty)
        // The same chain outside the module's shim file.
        #expect(!SourcePortability.problems(in: everywhere, allowedImports: allowed, mayImportLibC: false).isEmpty)
    }

    @Test func aServerModuleFoundationOrALinuxOnlyCallIsCaught() {
        let allowed: Set<String> = ["NIOCore"]
        for text in [
            "import SwitchboardServer\n", "import GRDB\n", "import Foundation\n", "@_exported import PostgresNIO\n",
            "let fd = epoll_create1(0)\n", "let x = Glibc.write(1, p, 1)\n", "let flags = SOCK_NONBLOCK | SOCK_CLOEXEC\n",
            "_ = send(fd, p, n, MSG_NOSIGNAL)\n", "let path = \"/proc/self/fd\"\n",
        ] {
            #expect(!SourcePortability.problems(in: text, allowedImports: allowed, mayImportLibC: false).isEmpty, "\(text)")
        }
        #expect(SourcePortability.problems(in: "import NIOCore\n// import Glibc in a comment\n", allowedImports: allowed, mayImportLibC: false).isEmpty)
    }
}

/// A line-by-line reading of a Swift file's imports and platform conditions.
enum SourcePortability {
    /// The C libraries of the platforms Swift runs on.
    static let libcModules: Set<String> = ["Darwin", "Glibc", "Musl", "Bionic", "Android", "WASILibc", "WinSDK", "ucrt", "CRT"]

    /// Calls, constants and paths that exist on Linux only (or whose Linux spelling differs on Darwin).
    static let linuxOnly = [
        "epoll_", "EPOLL", "eventfd", "timerfd", "inotify", "signalfd", "SOCK_NONBLOCK", "SOCK_CLOEXEC", "MSG_NOSIGNAL",
        "TCP_USER_TIMEOUT", "TCP_QUICKACK", "SO_PEERCRED", "accept4", "pipe2", "sendmmsg", "recvmmsg", "prctl", "/proc/",
        "Glibc.", "Musl.",
    ]

    /// What is wrong in `text`: imports outside `allowedImports` (the C library only when `mayImportLibC`, and then
    /// only each under its own `#if canImport`, with Darwin, Glibc and Musl all covered), and Linux-only names.
    static func problems(in text: String, allowedImports: Set<String>, mayImportLibC: Bool) -> [String] {
        var problems: [String] = []
        var conditions: [String?] = []  // the module of each open `#if canImport(X)` branch, nil for other conditions
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = Self.code(raw)
            let place = "line \(number + 1)"
            if line.hasPrefix("#if ") {
                conditions.append(Self.canImportModule(line))
            } else if line.hasPrefix("#elseif ") {
                if !conditions.isEmpty { conditions[conditions.count - 1] = Self.canImportModule(line) }
            } else if line.hasPrefix("#else") {
                if !conditions.isEmpty { conditions[conditions.count - 1] = nil }
            } else if line.hasPrefix("#endif") {
                _ = conditions.popLast()
            } else if let module = Self.importedModule(line) {
                if Self.libcModules.contains(module) {
                    if !mayImportLibC {
                        problems.append("\(place): imports \(module) outside the module's C-library shim")
                    } else if conditions.last != module {
                        problems.append("\(place): imports \(module) without `#if canImport(\(module))` around it")
                    }
                } else if !allowedImports.contains(module) {
                    problems.append("\(place): imports \(module), which the client's modules may not")
                }
            }
            for name in Self.linuxOnly where line.contains(name) {
                problems.append("\(place): uses \(name), which is Linux-only")
            }
        }
        let libc = Self.libcImports(in: text)
        if !libc.isEmpty, !libc.isSuperset(of: ["Darwin", "Glibc", "Musl"]) {
            problems.append("imports \(libc.sorted()) but not Darwin, Glibc and Musl alike")
        }
        return problems
    }

    /// The C libraries `text` imports.
    static func libcImports(in text: String) -> Set<String> {
        Set(text.split(separator: "\n").compactMap { Self.importedModule(Self.code($0)) }.filter(Self.libcModules.contains))
    }

    /// The line without its comment and surrounding blanks.
    private static func code(_ line: Substring) -> String {
        let withoutComment = line.range(of: "//").map { line[..<$0.lowerBound] } ?? line
        return withoutComment.trimmingCharacters(in: .whitespaces)
    }

    /// `X` of `#if canImport(X)` or `#elseif canImport(X)`.
    private static func canImportModule(_ line: String) -> String? {
        guard let open = line.range(of: "canImport("), let close = line[open.upperBound...].firstIndex(of: ")") else {
            return nil
        }
        return String(line[open.upperBound..<close])
    }

    /// The module an `import` line names (`@_exported import X`, `public import X`, `import struct X.Y`).
    private static func importedModule(_ line: String) -> String? {
        let words = line.split(separator: " ")
        guard let index = words.firstIndex(of: "import"), words[..<index].allSatisfy({ $0.hasPrefix("@") || $0 == "public" || $0 == "package" || $0 == "internal" || $0 == "private" || $0 == "fileprivate" }) else {
            return nil
        }
        var rest = words[(index + 1)...]
        if let kind = rest.first, ["struct", "class", "enum", "protocol", "func", "var", "let", "typealias"].contains(kind) {
            rest = rest.dropFirst()
        }
        return rest.first.map { String($0.split(separator: ".")[0]) }
    }
}
