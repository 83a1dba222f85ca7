import SwitchboardServer
import SwitchboardWire

/// Who an API request runs as, from its `Authorization: Bearer <credential>` header: the name of the API key whose
/// secret it is, else the user of an admin token the gateway verifies as at login (401 for a token that does not
/// verify or is revoked, 403 for one that is not an admin's). Without API keys in open development mode the API is
/// open, as the wire is there: every request runs as ``openUserID``.
struct APIAccess: Sendable, CustomStringConvertible {
    /// Why a request is refused: the HTTP status (401 or 403) and the wire's error.
    struct Refusal: Error, Sendable {
        var status: Int
        var error: ErrorBody
    }

    /// The user id of requests to an open API.
    static let openUserID = "api"

    let keys: APIKeys
    let operations: GatewayOperations

    /// Whether anyone may call (open development mode and no API keys).
    var isOpen: Bool { self.keys.isEmpty && self.operations.isOpenDevelopmentMode }

    var description: String {
        if self.isOpen { return "open development mode" }
        return self.keys.isEmpty ? "admin tokens" : "API keys and admin tokens"
    }

    /// The caller of a request whose `Authorization` header is `authorization`.
    func caller(authorization: String?) async -> Result<GatewayOperations.Caller, Refusal> {
        if self.isOpen { return .success(.trusted(userID: Self.openUserID)) }
        guard let credential = Self.bearer(authorization) else {
            return .failure(
                Refusal(status: 401, error: ErrorBody(.notAuthenticated, "an API key or an admin token is required: Authorization: Bearer <credential>")))
        }
        if let name = self.keys.name(of: credential) {
            return .success(.trusted(userID: name))
        }
        if self.operations.isOpenDevelopmentMode {
            return .failure(Refusal(status: 401, error: ErrorBody(.invalidToken, "not an API key")))
        }
        switch await self.operations.admin(token: credential) {
        case .success(let caller): return .success(caller)
        case .failure(let refusal): return .failure(Refusal(status: refusal.status, error: refusal.error))
        }
    }

    /// The credential of an `Authorization: Bearer <credential>` header (the scheme in any case), nil for anything
    /// else.
    static func bearer(_ header: String?) -> String? {
        guard let header else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let credential = parts[1].drop(while: { $0 == " " || $0 == "\t" })
        let trimmed = credential.reversed().drop(while: { $0 == " " || $0 == "\t" }).reversed()
        return trimmed.isEmpty ? nil : String(trimmed)
    }
}
