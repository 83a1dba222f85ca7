import Foundation
import NIOCore
import SwitchboardDump
import SwitchboardWire
import Testing

/// `Fixtures/session.bin`: the capture `sbdump proxy --capture` wrote of a real session through the tap proxy
/// (the scenario of `TapProxySessionTests` in SwitchboardServerTests): handshake, metadata writes, a subscription
/// with its pushes, a compressed read, a CAS conflict, PING/PONG, logout.
@Suite struct CaptureFixtureTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/session.bin")

    static func load() throws -> ByteBuffer {
        ByteBuffer(bytes: try Data(contentsOf: Self.fixture))
    }

    @Test("the captured session decodes whole: handshake first, every request answered by a response of its op")
    func capturedSessionDecodes() throws {
        let bytes = try Self.load()
        let events = StreamDumper.dump(bytes)
        #expect(events.allSatisfy { $0.problem == nil }, "\(events.filter { $0.problem != nil }.map { TextRenderer().render($0) })")
        let frames = events.compactMap(\.frame)
        #expect(frames.reduce(0) { $0 + $1.wireSize } == bytes.readableBytes)
        #expect(frames.allSatisfy { $0.message != nil })

        #expect(frames.first?.opName == "hello" && frames.first?.header.kind == .control)
        #expect(frames.dropFirst().first?.opName == "welcome")
        let requests = frames.filter { $0.header.kind == .request }
        let responses = frames.filter { $0.header.kind == .response }
        #expect(requests.count >= 6 && responses.count == requests.count)
        for response in responses {
            guard case .answers(let request, _) = response.pairing else {
                Issue.record("response #\(response.index) is not paired")
                continue
            }
            #expect(request.op == response.header.op && request.requestID == response.requestID)
        }
        #expect(!events.contains { if case .unanswered = $0.kind { true } else { false } })
        #expect(frames.contains { $0.header.kind == .push && $0.opName == "storageEvent" })
        #expect(frames.contains { $0.header.flags.contains(.error) && $0.opName == "setUserMetadata" })
        #expect(frames.contains { $0.compression.map { $0.ratio < 0.5 } ?? false })
        #expect(frames.map(\.opName).suffix(2) == ["logout", "goAway"])
        #expect(frames.contains { $0.opName == "ping" } && frames.contains { $0.opName == "pong" })
    }

    @Test("the captured session reads the same from hex text as from the binary file")
    func capturedSessionFromHex() throws {
        let bytes = try Self.load()
        let fromHex = StreamDumper.dump(try HexTextDecoder.bytes(fromHex: Bytes.commentedHex(bytes)))
        let renderer = JSONLinesRenderer()
        #expect(fromHex.map(renderer.render) == StreamDumper.dump(bytes).map(renderer.render))
    }
}
