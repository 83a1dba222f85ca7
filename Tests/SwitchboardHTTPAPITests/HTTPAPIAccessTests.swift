import Crypto
import Foundation
import SwitchboardClient
@testable import SwitchboardHTTPAPI
@testable import SwitchboardServer
import SwitchboardWire
import Testing

/// Who may call the API, and what a request that is not one gets: API keys (compared by secret), admin tokens
/// verified as at login, 401 and 403 with the wire's codes, and JSON errors for bodies, methods and paths the API
/// does not take.
@Suite("The HTTP API: API keys, admin tokens and refused requests")
struct HTTPAPIAccessTests {
    static let get = #"{"channel":"room"}"#

    @Test("an API key or an admin token is let in; none, a wrong key or a bad token gets 401, a user's token 403")
    func keysAndTokens() async throws {
        try await withAPIGateway { gateway in
            let withKey = try await gateway.call("getChannelMetadata", Self.get)
            #expect(withKey.status == 200, "\(withKey)")
            let otherKey = try await gateway.call("getChannelMetadata", Self.get, credential: "sk_other_0123456789abcdef")
            #expect(otherKey.status == 200, "\(otherKey)")
            let admin = try await gateway.call(
                "getChannelMetadata", Self.get, credential: APITokens.token("ops", role: .admin))
            #expect(admin.status == 200, "\(admin)")

            let none = try await gateway.call("getChannelMetadata", Self.get, credential: nil)
            #expect(none.status == 401 && none.error?.name == "notAuthenticated", "\(none)")
            #expect(none.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
            let wrongKey = try await gateway.call("getChannelMetadata", Self.get, credential: APITokens.keySecret + "x")
            #expect(wrongKey.status == 401 && wrongKey.error?.name == "invalidToken", "\(wrongKey)")
            let expired = try await gateway.call(
                "getChannelMetadata", Self.get, credential: APITokens.token("ops", role: .admin, expiresIn: -120))
            #expect(expired.status == 401 && expired.error?.name == "tokenExpired", "\(expired)")
            let user = try await gateway.call("getChannelMetadata", Self.get, credential: APITokens.token("alice"))
            #expect(user.status == 403 && user.error?.name == "permissionDenied", "\(user)")
            let basic = try await gateway.post(
                "/v1/getChannelMetadata", Self.get, credential: nil)
            #expect(basic.status == 401)
        }
    }

    @Test("a revoked admin token is refused as a login with it would be")
    func revokedToken() async throws {
        try await withAPIGateway { gateway in
            let token = APITokens.token("ops", role: .admin, jti: "t-1")
            #expect(try await gateway.call("getChannelMetadata", Self.get, credential: token).status == 200)
            let revoke = try await gateway.call("revokeTokens", #"{"tokenId":"t-1"}"#)
            #expect(revoke.status == 200, "\(revoke)")
            let after = try await gateway.call("getChannelMetadata", Self.get, credential: token)
            #expect(after.status == 401 && after.error?.name == "tokenRevoked", "\(after)")
        }
    }

    @Test("bodies that are not a request, other methods and other paths get JSON errors with the wire's codes")
    func refusedRequests() async throws {
        try await withAPIGateway { gateway in
            let notJSON = try await gateway.call("getChannelMetadata", "{not json")
            #expect(notJSON.status == 400 && notJSON.error?.name == "malformedBody", "\(notJSON)")
            let array = try await gateway.call("getChannelMetadata", "[]")
            #expect(array.status == 400 && array.error?.name == "malformedBody", "\(array)")
            let wrongType = try await gateway.call("getChannelMetadata", #"{"channel":5}"#)
            #expect(wrongType.status == 400 && wrongType.error?.name == "malformedBody", "\(wrongType)")
            let negative = try await gateway.call("publishEvent", #"{"eventType":-1}"#)
            #expect(negative.status == 400 && negative.error?.name == "malformedBody", "\(negative)")
            let latin1 = try await LoopbackHTTP.request(
                "POST", "/v1/getChannelMetadata", to: gateway.api, body: Array(#"{"channel":""#.utf8) + [0xE9] + Array(#""}"#.utf8),
                headers: [("Authorization", "Bearer \(APITokens.keySecret)")])
            #expect(latin1.status == 400 && latin1.error?.name == "invalidUtf8", "\(latin1)")
            let huge = #"{"channel":""# + String(repeating: "x", count: 1 << 20) + #""}"#
            let tooLarge = try await gateway.call("getChannelMetadata", huge)
            #expect(tooLarge.status == 413 && tooLarge.error?.name == "frameTooLarge", "\(tooLarge)")
            let retry = try await gateway.call("acquireLock", #"{"channel":"room","lockName":"edit","retry":true}"#)
            #expect(retry.status == 400 && retry.error?.name == "invalidArgument", "\(retry)")

            let get = try await LoopbackHTTP.request(
                "GET", "/v1/getChannelMetadata", to: gateway.api, headers: [("Authorization", "Bearer \(APITokens.keySecret)")])
            #expect(get.status == 405 && get.headers["allow"] == "POST", "\(get)")
            let unknown = try await gateway.call("frobnicate", "{}")
            #expect(unknown.status == 404 && unknown.error?.name == "unknownOperation", "\(unknown)")
            let session = try await gateway.call("logout", "{}")
            #expect(session.status == 404 && session.error?.name == "unknownOperation", "\(session)")
        }
    }

    @Test("without API keys in open development mode anyone may call, as the user api")
    func openDevelopmentMode() async throws {
        try await withAPIGateway(keys: .none, secret: nil) { gateway in
            let set = try await gateway.call(
                "setChannelMetadata", #"{"channel":"room","items":[{"key":"k","value":"v"}],"recordUserId":true}"#,
                credential: nil)
            #expect(set.status == 200, "\(set)")
            let get = try await gateway.call("getChannelMetadata", #"{"channel":"room"}"#, credential: nil)
            #expect(try get.json["items"]?.arrayValue?.first?["authorUserId"] == .string("api"), "\(get)")
        }
    }

    @Test("a key file's keys: names, secrets of 16 bytes or more, no repeats; matched by the whole secret")
    func keyFile() throws {
        let keys = try APIKeys(parsing: "# keys\n\nalpha 0123456789abcdef\n  beta\tfedcba9876543210zz  \n")
        #expect(keys.name(of: "0123456789abcdef") == "alpha")
        #expect(keys.name(of: "fedcba9876543210zz") == "beta")
        #expect(keys.name(of: "0123456789abcde") == nil)
        #expect(keys.name(of: "0123456789abcdefg") == nil)
        #expect(keys.name(of: "") == nil)
        // Secrets whose SHA-256 shares its first one or two bytes with a key's are refused: the whole digest counts.
        let digest = Array(SHA256.hash(data: Array("0123456789abcdef".utf8)))
        for shared in 1...2 {
            let near = try #require(
                (0..<2_000_000).lazy.map { "candidate-\($0)-0123456789" }.first {
                    Array(SHA256.hash(data: Array($0.utf8)).prefix(shared)) == Array(digest.prefix(shared))
                })
            #expect(keys.name(of: near) == nil, "\(near) shares \(shared) digest bytes with alpha's secret")
        }
        #expect(throws: APIKeys.Failure.self) { try APIKeys(parsing: "alpha short") }
        #expect(throws: APIKeys.Failure.self) { try APIKeys(parsing: "alpha") }
        #expect(throws: APIKeys.Failure.self) { try APIKeys(parsing: "a 0123456789abcdef\nb 0123456789abcdef") }
        #expect(throws: APIKeys.Failure.self) { try APIKeys(parsing: "a 0123456789abcdef\na 0123456789abcdeX") }
    }
}
