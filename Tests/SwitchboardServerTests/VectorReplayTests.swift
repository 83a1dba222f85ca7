import Foundation
import NIOCore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Replays the session-layer vectors of `Protocol/vectors/malformed.json` against the gateway over real sockets, as
/// `Protocol/SPEC.md` §10.2 describes: every vector not marked `replayable: false` must end with its expected error.
@Suite struct VectorReplayTests {
    struct SessionVector: Sendable, CustomTestStringConvertible {
        var name: String
        var hex: String
        var code: UInt64
        var requestID: UInt32?
        var fatal: Bool
        var replayable: Bool
        var testDescription: String { self.name }
    }

    static let sessionVectors: [SessionVector] = {
        let url = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Protocol/vectors/malformed.json")
        guard let data = try? Data(contentsOf: url), let text = String(data: data, encoding: .utf8),
            let root = try? JSONValue.parse(text), let vectors = root["vectors"]?.arrayValue
        else { return [] }
        return vectors.compactMap { vector in
            guard vector["layer"]?.stringValue == "session", let expected = vector["expectError"] else { return nil }
            return SessionVector(
                name: vector["name"]?.stringValue ?? "?", hex: vector["hex"]?.stringValue ?? "",
                code: expected["code"]?.uint64Value ?? 0,
                requestID: expected["requestId"]?.uint64Value.map { UInt32($0) },
                fatal: expected["fatal"]?.boolValue ?? true,
                replayable: vector["replayable"]?.boolValue ?? true)
        }
    }()

    @Test func theVectorsThatCannotBeReplayedAreExactlyTheOnesThatNeedUnansweredRequests() {
        #expect(Self.sessionVectors.count >= 13)
        #expect(
            Self.sessionVectors.filter { !$0.replayable }.map(\.name).sorted()
                == ["session.duplicateBeforeBody", "session.duplicateRequestId", "session.tooManyInflight"])
    }

    @Test(arguments: Transport.allCases)
    func everyReplayableSessionVectorEndsWithItsError(transport: Transport) async throws {
        let replayable = Self.sessionVectors.filter(\.replayable)
        #expect(!replayable.isEmpty)
        try await withGateway { gateway in
            for vector in replayable {
                let socket = try RawSocket(gateway, transport)
                socket.send(ByteBuffer(bytes: Hex.bytes(vector.hex) ?? []))
                let messages = try await socket.drainUntilClosed()
                if vector.fatal {
                    guard case .control(.goAway(let goAway)) = messages.last else {
                        Issue.record("\(vector.name): expected GOAWAY \(vector.code) last, got \(messages)")
                        continue
                    }
                    #expect(goAway.code == vector.code, "\(vector.name)")
                } else {
                    let answered = messages.contains { message in
                        if case .error(let id, _, let body) = message {
                            return id == vector.requestID && UInt64(body.code) == vector.code
                        }
                        return false
                    }
                    #expect(answered, "\(vector.name): no error \(vector.code) for request \(vector.requestID ?? 0)")
                }
            }
        }
    }
}
