import Foundation
import SwitchboardWire

/// Who may read the inspector's API: the holder of an admin token the gateway verifies, as a client's HELLO would be
/// verified (the same ``TokenAuthority``, keys replaced on reload included, and the same login policy: a revoked
/// token or a banned user is refused); in open development mode (no token secret or keys) anyone, as the wire
/// protocol lets anyone in as an admin there.
enum InspectorAccess {
    /// Why a request is refused: 401 (no token, or one that does not verify) or 403 (a verified token that is not an
    /// admin's).
    struct Refusal: Error, Sendable {
        /// 401 or 403.
        var status: Int
        /// The error as the wire protocol names it.
        var error: ErrorBody
    }

    /// The user id of the inspector's requests in open development mode.
    static let openModeUserID = "inspector"

    /// The identity of a request with the `Authorization` header `authorization`, or why it is refused.
    ///
    /// - Parameters:
    ///   - authority: the gateway's authority now (nil: open development mode).
    ///   - policy: the gateway's login policy (bans, revocations).
    ///   - nowMillis: server time.
    static func identity(
        authorization: String?, authority: TokenAuthority?, policy: (any LoginPolicy)?, nowMillis: Int64
    ) async -> Result<SessionInfo, Refusal> {
        guard let authority else {
            return .success(self.session(userID: self.openModeUserID, token: nil))
        }
        guard let token = self.bearerToken(authorization) else {
            return .failure(Refusal(status: 401, error: ErrorBody(.notAuthenticated, "an admin token is required: Authorization: Bearer <token>")))
        }
        let verified: AccessToken
        do {
            verified = try await authority.verify(token, now: nowMillis / 1000)
        } catch {
            return .failure(Refusal(status: 401, error: ErrorBody(error.code, error.message)))
        }
        if let refusal = policy?.refusal(of: verified, userID: verified.userID, nowMillis: nowMillis) {
            return .failure(Refusal(status: 401, error: ErrorBody(refusal.code, refusal.message)))
        }
        guard verified.role == .admin else {
            return .failure(Refusal(status: 403, error: ErrorBody(.permissionDenied, "the inspector needs an admin token")))
        }
        return .success(self.session(userID: verified.userID, token: verified))
    }

    /// The token of an `Authorization: Bearer <token>` header (the scheme in any case), nil for anything else.
    static func bearerToken(_ header: String?) -> String? {
        guard let header else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = parts[1].trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : token
    }

    /// The identity the inspector's requests run under: the token's admin (or the open-mode user), every grant.
    private static func session(userID: String, token: AccessToken?) -> SessionInfo {
        SessionInfo(
            sessionID: "inspector", connectionID: 0, userID: userID, role: .admin, clientType: .server,
            deviceID: "inspector", features: [], grants: .unrestricted, tokenID: token?.tokenID,
            tokenIssuedAt: token?.issuedAt)
    }
}
