import NIOCore
import SwitchboardWire

// Codec benchmark: frames/s and MB/s for encoding and decoding typical frames, one core, release build.
// Usage: swift run -c release sbcodecbench [seconds-per-case]

// Usage: sbcodecbench [seconds-per-case [case-number]]
let secondsPerCase = CommandLine.arguments.count > 1 ? Double(CommandLine.arguments[1]) ?? 1.0 : 1.0
let onlyCase = CommandLine.arguments.count > 2 ? Int(CommandLine.arguments[2]) : nil

struct Case {
    var name: String
    var message: SwitchboardMessage
    var compressionThreshold: Int?
}

let oneItem = SwitchboardMessage.request(
    id: 1, .setUserMetadata(SetUserMetadataRequest(userId: "Tony", items: [MetadataItem(key: "Name", value: "Tony")])))
let threeItems = SwitchboardMessage.request(
    id: 1,
    .setUserMetadata(
        SetUserMetadataRequest(
            userId: "Tony",
            items: [
                MetadataItem(key: "Name", value: "Tony"), MetadataItem(key: "Age", value: "40"),
                MetadataItem(key: "Avatar", value: "https://your-domain/avatar/tony.png"),
            ], majorRevision: 734_874_892, recordTs: true, recordUserId: true)))
let whoNow = SwitchboardMessage.response(
    id: 1,
    .whoNow(
        WhoNowResponse(
            totalOccupancy: 2_500,
            users: (0..<100).map { UserState(userId: "user-\($0)", states: [StateItem(key: "mood", value: "busy")]) },
            nextPage: "p1.2500.user-99")))
var ext = ""
var seed: UInt64 = 42
while ext.utf8.count < 16 << 10 {
    // Text with some repetition, like JSON application data: compresses but not trivially.
    seed = seed &* 6_364_136_223_846_793_005 &+ 1
    ext += "{\"k\":\"key-\(seed >> 58)\",\"v\":\(seed >> 40)},"
}
let event = SwitchboardMessage.push(
    .subscribedEvents(
        SubscribedEvents(events: [
            SubscribedEvent(
                eventId: "e-1", value: 10_001, publisher: "Tony", timestampMs: 1_700_000_000_000,
                expiresAtMs: 1_700_600_000_000, ext: String(ext.utf8.prefix(16 << 10))!)
        ])))

let cases = [
    Case(name: "setUserMetadata, 1 item", message: oneItem, compressionThreshold: nil),
    Case(name: "setUserMetadata, 3 items", message: threeItems, compressionThreshold: nil),
    Case(name: "whoNow response, 100 users", message: whoNow, compressionThreshold: nil),
    Case(name: "whoNow response, 100 users, zlib", message: whoNow, compressionThreshold: 512),
    Case(name: "event push, 16 KiB, zlib", message: event, compressionThreshold: 512),
]

func measure(_ seconds: Double, _ body: () -> Int) -> (count: Int, bytes: Int, elapsed: Double) {
    let clock = ContinuousClock()
    var count = 0
    var bytes = 0
    let start = clock.now
    let deadline = start.advanced(by: .milliseconds(Int64(seconds * 1000)))
    while clock.now < deadline {
        for _ in 0..<64 {
            bytes &+= body()
            count += 1
        }
    }
    let elapsed = clock.now - start
    let secondsElapsed = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    return (count, bytes, secondsElapsed)
}

func row(_ name: String, _ result: (count: Int, bytes: Int, elapsed: Double), frameSize: Int) -> String {
    let perSecond = Double(result.count) / result.elapsed
    let megabytes = perSecond * Double(frameSize) / 1_000_000
    let rate = perSecond >= 1_000_000 ? "\(Double(Int(perSecond / 10_000)) / 100)M" : "\(Int(perSecond / 1000))k"
    return "| \(name) | \(frameSize) | \(rate) | \(Int(megabytes)) |"
}

print("| case | frame bytes | frames/s | MB/s (wire bytes) |")
print("|---|---|---|---|")
var sink = 0
for (number, benchCase) in cases.enumerated() where onlyCase == nil || onlyCase == number {
    let encoder = FrameEncoder(compressionThreshold: benchCase.compressionThreshold)
    var output = ByteBufferAllocator().buffer(capacity: 64 << 10)
    encoder.encode(benchCase.message, into: &output)
    let frameBytes = output
    let frameSize = frameBytes.readableBytes

    let encode = measure(secondsPerCase) {
        output.clear()
        return encoder.encode(benchCase.message, into: &output)
    }
    print(row("encode \(benchCase.name)", encode, frameSize: frameSize))

    var decoder = FrameDecoder()
    let decode = measure(secondsPerCase) {
        var input = frameBytes
        guard let frame = try? decoder.decodeFrame(from: &input), let message = try? SwitchboardMessage.decode(frame)
        else { fatalError("benchmark frame did not decode") }
        return message.bodySize
    }
    print(row("decode \(benchCase.name)", decode, frameSize: frameSize))

    if benchCase.compressionThreshold == nil {
        let both = measure(secondsPerCase) {
            var input = frameBytes
            guard let frame = try? decoder.decodeFrame(from: &input), let message = try? SwitchboardMessage.decode(frame)
            else { fatalError("benchmark frame did not decode") }
            output.clear()
            return encoder.encode(message, into: &output)
        }
        print(row("decode+encode \(benchCase.name)", both, frameSize: frameSize))
    }
    sink &+= encode.bytes &+ decode.bytes
}
if sink == 42 { print("") }  // keeps the optimiser from dropping the work
