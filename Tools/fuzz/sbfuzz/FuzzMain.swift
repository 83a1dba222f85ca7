import Foundation
import SwitchboardFuzzing

// sbfuzz: the libFuzzer harness (two targets) and the remote fuzzer.
//
// Built with `-sanitize=fuzzer,address -DFUZZING` (see Tools/fuzz/run.sh) libFuzzer supplies the driver and calls
// `LLVMFuzzerTestOneInput` with the target SBFUZZ_TARGET names (`decoder`, the default, `handlers` or `token`). Built
// normally, `sbfuzz [--target T] FILE|DIR...` replays inputs (a crash file, a corpus) through the same target, so a
// finding can be reproduced and debugged without the sanitizer build. `sbfuzz remote ...` (either build) fuzzes a
// running gateway over its sockets.

/// What the libFuzzer harness fuzzes.
enum FuzzTarget: String, CaseIterable {
    /// The frame decoder and message codec (``DecoderTarget``).
    case decoder
    /// The request handlers behind a connection (``HandlerTarget``).
    case handlers
    /// Login token verification (``TokenTarget``).
    case token

    /// The target SBFUZZ_TARGET names; the decoder when it is not set.
    static let selected: FuzzTarget = {
        guard let name = ProcessInfo.processInfo.environment["SBFUZZ_TARGET"] else { return .decoder }
        guard let target = FuzzTarget(rawValue: name) else {
            FileHandle.standardError.write(Data("SBFUZZ_TARGET must be decoder, handlers or token, not \(name)\n".utf8))
            exit(2)
        }
        return target
    }()

    /// Runs one input through the target.
    func run(_ bytes: UnsafeRawBufferPointer) {
        switch self {
        case .decoder: DecoderTarget.run(bytes)
        case .handlers: HandlerTarget.shared.run(bytes)
        case .token: TokenTarget.run(bytes)
        }
    }
}

#if FUZZING
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTarget.selected.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// libFuzzer's entry point for programs that keep their own `main` (SwiftPM gives executables one).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt
#endif

@main
struct FuzzMain {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == "remote" {
            exit(RemoteCommand.run(Array(arguments.dropFirst())))
        }
        #if FUZZING
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, fuzzTestOneInput))
        #else
        exit(Self.replay(arguments))
        #endif
    }

    static let usage = """
        usage: sbfuzz [--target decoder|handlers|token] FILE|DIR...   replays fuzzer inputs through a target
                                                                (default: SBFUZZ_TARGET, else decoder)
               sbfuzz remote (--unix PATH | --tcp HOST:PORT) [--seconds N] [--connections C] [--seed S]
                             [--probe-every FRAMES] [--answer-timeout SECONDS]
                                                                fuzzes a running gateway (open development mode)
        Tools/fuzz/run.sh [seconds] [decoder|handlers|token|all] builds the libFuzzer harness and runs it.
        """

    /// Replays fuzzer inputs (files, or every file of a directory) through a target, without the sanitizer build.
    static func replay(_ arguments: [String]) -> Int32 {
        var target = FuzzTarget.selected
        var paths: [String] = []
        var index = 0
        while index < arguments.count {
            if arguments[index] == "--target", index + 1 < arguments.count, let named = FuzzTarget(rawValue: arguments[index + 1]) {
                target = named
                index += 2
                continue
            }
            if arguments[index].hasPrefix("-") {
                print(Self.usage)
                return 2
            }
            paths.append(arguments[index])
            index += 1
        }
        if paths.isEmpty {
            print(Self.usage)
            return 2
        }
        var files: [String] = []
        for path in paths {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                files += names.sorted().map { path + "/" + $0 }
            } else {
                files.append(path)
            }
        }
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else {
                print("cannot open \(file)")
                return 1
            }
            data.withUnsafeBytes { target.run($0) }
            print("\(file): ok (\(data.count) bytes, \(target.rawValue))")
        }
        return 0
    }
}

/// `sbfuzz remote`: the command line of ``RemoteFuzzer``.
enum RemoteCommand {
    static func run(_ arguments: [String]) -> Int32 {
        var endpoint: GatewayEndpoint?
        var seconds = 60.0
        var connections = 8
        var seed = UInt64.random(in: 1...UInt64.max)
        var probeEvery = 2_000
        var answerTimeout = 5.0
        var index = 0
        func value() -> String? {
            index += 1
            return index < arguments.count ? arguments[index] : nil
        }
        while index < arguments.count {
            let option = arguments[index]
            let parsed: Bool
            switch option {
            case "--unix": parsed = value().map { endpoint = .unix(path: $0) } != nil
            case "--tcp": parsed = value().flatMap { GatewayEndpoint($0) }.map { endpoint = $0 } != nil
            case "--seconds": parsed = value().flatMap(Double.init).map { seconds = $0 } != nil
            case "--connections": parsed = value().flatMap(Int.init).map { connections = $0 } != nil
            case "--seed": parsed = value().flatMap { UInt64($0) }.map { seed = $0 } != nil
            case "--probe-every": parsed = value().flatMap(Int.init).map { probeEvery = $0 } != nil
            case "--answer-timeout": parsed = value().flatMap(Double.init).map { answerTimeout = $0 } != nil
            default: parsed = false
            }
            guard parsed else {
                print("sbfuzz remote: bad option \(option)\n\(FuzzMain.usage)")
                return 2
            }
            index += 1
        }
        guard let endpoint else {
            print("sbfuzz remote: give --unix PATH or --tcp HOST:PORT\n\(FuzzMain.usage)")
            return 2
        }
        // Progress and failures go to standard error at once; the report to standard output at the end.
        let log: (String) -> Void = { FileHandle.standardError.write(Data("sbfuzz remote: \($0)\n".utf8)) }
        log("\(endpoint) for \(seconds) s over \(connections) connections, seed \(seed)")
        let configuration = RemoteFuzzConfiguration(
            endpoint: endpoint, seconds: seconds, connections: connections, seed: seed, probeEveryFrames: probeEvery,
            answerTimeoutSeconds: answerTimeout)
        let report = RemoteFuzzer(configuration, log: log).run()
        print(report)
        if !report.passed {
            print("reproduce: sbfuzz remote --\(endpoint.description.hasPrefix("unix") ? "unix" : "tcp") ... --seed \(seed) --connections \(connections)")
        }
        return report.passed ? 0 : 1
    }
}
