import Foundation
import NIOCore
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// An area that, for `whereNow`, breaks a victim's socket and pushes to the victim while holding the lock its
/// `sessionEnded` takes too: what ProfileArea does when it asks a provider whose client has just gone away.
final class PushUnderLockArea: RequestHandler, SessionObserver {
    /// Sessions by user.
    let sessions = Mutex<[String: SessionHandle]>([:])
    /// The client-side descriptor of the victim's connection (this process owns both ends).
    let victimClientSocket = Atomic<Int32>(-1)

    var operations: [Opcode] { [.whereNow] }

    func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        self.sessions.withLock { sessions in
            // The victim's peer stops receiving: the gateway's next direct write to it fails with EPIPE.
            shutdown(self.victimClientSocket.load(ordering: .relaxed), Int32(SHUT_RDWR))
            sessions["victim"]?.send(.serverNotice(ServerNotice(code: 1, message: "to a closed socket")))
        }
        return .response(.whereNow(WhereNowResponse()))
    }

    func sessionStarted(_ session: SessionHandle) {
        self.sessions.withLock { $0[session.info.userID] = session }
    }

    func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        self.sessions.withLock { $0[session.info.userID] = nil }
    }
}

@Suite struct SessionEndDuringPushTests {
    /// Regression (found by the remote fuzzer, `sbfuzz remote --unix ... --seed 1 --connections 16` against a release
    /// gateway): ProfileArea sent a provider request under its state lock; the direct write met the provider's closed
    /// socket, the channel closed inside the send, and ProfileArea.sessionEnded took the same lock again: "Recursive
    /// call to lock Mutex", and the gateway was gone.
    @Test func aPushThatMeetsAClosedSocketEndsTheSessionAfterTheSendNotInsideIt() async throws {
        let area = PushUnderLockArea()
        let recorder = SessionRecorder()
        try await withGateway(handlers: [area], observers: [area, recorder]) { gateway in
            let victim = try RawSocket(gateway, .unix)
            _ = try await victim.login("victim")
            area.victimClientSocket.store(victim.fd, ordering: .relaxed)
            let caller = try RawSocket(gateway, .unix)
            _ = try await caller.login("caller")
            caller.send(.request(id: 1, .whereNow(WhereNowRequest())))
            guard case .response(id: 1, .whereNow)? = try await caller.next() else {
                Issue.record("no answer to whereNow")
                return
            }
            #expect(await recorder.wait { $0.ended.contains { $0.user == "victim" } })
            #expect(area.sessions.withLock { $0["victim"] == nil && $0["caller"] != nil })
        }
    }
}
