import Foundation
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Synchronization
import Testing

/// The token secret of the authorization tests' gateways.
let authorizationSecret = Array("authorization-secret-0123456789abcdef".utf8)

/// A login token for `user` on a gateway with ``authorizationSecret``; users get the gateway's default grants.
func authorizationToken(_ user: String, admin: Bool = false) -> String {
    TokenAuthority(secret: authorizationSecret)
        .mint(userID: user, expiresAt: Int64(Date().timeIntervalSince1970) + 3600, role: admin ? .admin : .user)
}

/// Runs `body` against a gateway with every area, tokens required, and `grants` as its default grants (what every
/// user-role session may do).
func withAuthorizationGateway<T: Sendable>(
    grants: GrantSet, _ body: @Sendable (RunningGateway) async throws -> T
) async throws -> T {
    try await withGateway(
        {
            $0.tokenSecret = authorizationSecret
            $0.defaultGrants = grants
        },
        application: { $0.areas = .all },
        body)
}

extension RunningGateway {
    /// A session of `user` (role user, with the default grants; or an admin) on TCP.
    func session(_ user: String, admin: Bool = false) async throws -> SwitchboardConnection {
        try await self.connect(.tcp, user: "", token: authorizationToken(user, admin: admin))
    }
}

/// The grants written as a claim, for tests that read better that way.
func grants(_ json: String) throws -> GrantSet {
    try GrantSet(jsonText: json)
}

/// Sends `request` and returns the response or the client error, so a test can tell them apart.
func outcome(_ connection: SwitchboardConnection, _ request: Request) async -> Result<Response, SwitchboardClientError> {
    do {
        return .success(try await connection.send(request))
    } catch let error as SwitchboardClientError {
        return .failure(error)
    } catch {
        return .failure(SwitchboardClientError(code: .internal, message: "\(error)"))
    }
}

/// Every push a connection receives, collected in the background from when it is made.
final class PushLog: Sendable {
    private final class Box: Sendable {
        let received = Mutex<[Push]>([])
    }

    private let box = Box()
    private let task: Task<Void, Never>

    init(_ connection: SwitchboardConnection) {
        let box = self.box
        self.task = Task {
            for await push in connection.pushes { box.received.withLock { $0.append(push) } }
        }
    }

    deinit { self.task.cancel() }

    var all: [Push] { self.box.received.withLock { $0 } }

    /// Waits until `condition` holds for the pushes received, at most `seconds`.
    func wait(seconds: Double = 3, until condition: ([Push]) -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition(self.all) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition(self.all)
    }
}
