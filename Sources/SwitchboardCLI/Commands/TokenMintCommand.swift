import ArgumentParser
import Foundation
import SwitchboardServer

/// The claims of a token to mint and the private key to sign it with, when not the secret: the options
/// `switchboard token` and `sbctl token mint` share, checked and signed the same way.
public struct TokenClaimOptions: ParsableArguments {
    @Option(help: "The user the token is for.")
    public var user: String

    @Option(help: "Time to live: seconds, or with a unit: 90s, 30m, 1h, 7d.")
    public var ttl = "1h"

    @Option(help: "Expiry as a Unix time in seconds (instead of --ttl).")
    public var expires: Int64?

    @Flag(help: "Grant the admin role (act for any user).")
    public var admin = false

    @Option(help: ArgumentHelp("The grants claim, JSON: [{\"on\":\"message:room:*\",\"allow\":[\"read\",\"write\"]}]. Without it the gateway gives the token its default grants.", valueName: "json"))
    public var grants: String?

    @Option(help: "The jti claim: an id by which the token can be revoked.")
    public var jti: String?

    @Option(help: "The kid header: the key the gateway verifies the token with (--token-key, --jwks-file). Without it, the gateway's token secret.")
    public var kid: String?

    @Option(name: .customLong("not-before"), help: "The nbf claim: the token is not valid before this Unix time in seconds.")
    public var notBefore: Int64?

    @Option(name: .customLong("private-key"), help: "Sign with this PEM private key instead of the secret: RSA (RS256), EC P-256 (ES256) or Ed25519 (EdDSA).")
    public var privateKey: String?

    public init() {}

    /// The latest token expiry (s since the epoch) whose value in ms still fits an `Int64`, as the gateway keeps it.
    public static let latestExpiry = Int64.max / 1000

    /// The claims these options describe, issued at `now` (s since the epoch).
    ///
    /// - Throws: `ValidationError` naming the option that is out of range or malformed.
    public func claims(now: Int64) throws -> AccessToken {
        guard !self.user.isEmpty, self.user.utf8.count <= TokenAuthority.maxUserIDBytes else {
            throw ValidationError("--user must be 1 to \(TokenAuthority.maxUserIDBytes) bytes")
        }
        let expiresAt: Int64
        if let expires = self.expires {
            guard expires > now, expires <= Self.latestExpiry else {
                throw ValidationError("--expires must be a Unix time in seconds after now and before \(Self.latestExpiry)")
            }
            expiresAt = expires
        } else {
            guard let seconds = Self.parseDuration(self.ttl), seconds > 0 else {
                throw ValidationError("--ttl must be like 3600, 90s, 30m, 1h or 7d")
            }
            guard seconds <= Self.latestExpiry - now else {
                throw ValidationError("--ttl is too long: a token must expire within \(Self.latestExpiry - now) s")
            }
            expiresAt = now + seconds
        }
        var claims = AccessToken(
            userID: self.user, expiresAt: expiresAt, role: self.admin ? .admin : .user, tokenID: self.jti, issuedAt: now)
        if let text = self.grants {
            do {
                claims.grants = try GrantSet(jsonText: text)
            } catch {
                throw ValidationError("--grants: \(error.message)")
            }
        }
        if let jti = self.jti, jti.isEmpty || jti.utf8.count > 256 {
            throw ValidationError("--jti must be 1 to 256 bytes")
        }
        if let kid = self.kid, kid.isEmpty || kid.utf8.count > 256 {
            throw ValidationError("--kid must be 1 to 256 bytes")
        }
        return claims
    }

    /// The signed token: with `--private-key` when given, else with the HMAC secret `secret` returns (HS256).
    ///
    /// - Throws: `ValidationError` for a bad option or an unusable key, or what `secret` throws.
    public func mint(now: Int64 = Int64(Date().timeIntervalSince1970), secret: () async throws -> [UInt8]) async throws
        -> String
    {
        let claims = try self.claims(now: now)
        if let path = self.privateKey {
            do {
                let pem = try TokenSecretText.text(ofFile: path, source: "--private-key")
                return try await TokenSigner.sign(claims, notBefore: self.notBefore, keyID: self.kid, privateKeyPEM: pem)
            } catch {
                throw ValidationError(error.message.hasPrefix("--private-key") ? error.message : "--private-key \(path): \(error.message)")
            }
        }
        return TokenAuthority(secret: try await secret()).mint(claims, notBefore: self.notBefore, keyID: self.kid)
    }

    /// Seconds in `text` (a number, or one with a unit s, m, h or d); nil when it is not one or does not fit an `Int64`.
    public static func parseDuration(_ text: String) -> Int64? {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        if let last = text.last, let unit = units[last] {
            guard let count = Int64(text.dropLast()) else { return nil }
            let (seconds, overflowed) = count.multipliedReportingOverflow(by: unit)
            return overflowed ? nil : seconds
        }
        return Int64(text)
    }
}

/// `sbctl token mint`: a login token (a JWT) signed with the gateway's HMAC secret or a private key, for a backend's
/// scripts and for tests; the same claims and checks as `switchboard token`.
public struct TokenMintCommand: LocalCommand {
    public static let configuration = CommandConfiguration(
        commandName: "mint",
        abstract: "Mint a login token (a JWT) with grants, signed with the gateway's secret (HS256) or a private key.",
        discussion: """
            The secret comes from --secret-file, else SWITCHBOARD_TOKEN_SECRET_FILE, else SWITCHBOARD_TOKEN_SECRET (the \
            variables the gateway reads); it must be at least 32 bytes, a file's without the whitespace around it. \
            With --private-key no secret is read. Prints the token; the claims are sub, exp, iat and those given \
            (Docs/tokens.md). Example: sbctl token mint --user ann --grants '[{"on":"message:room:*","allow":["read","write"]}]' --secret-file secret
            """)

    @OptionGroup public var claims: TokenClaimOptions

    @Option(name: .customLong("secret-file"), help: "A file holding the gateway's token secret.")
    public var secretFile: String?

    public init() {}

    public func run(environment: [String: String], console: Console) async -> ExitStatus {
        do {
            let token = try await self.claims.mint { try self.secret(environment: environment) }
            console.out(token)
            return .success
        } catch let error as ValidationError {
            console.err("Error: \(error.message)")
            return .usage
        } catch {
            console.err("Error: \(error)")
            return .software
        }
    }

    /// The HMAC key from `--secret-file` or the gateway's environment variables.
    func secret(environment: [String: String]) throws -> [UInt8] {
        do {
            if let path = self.secretFile {
                return try TokenSecretText.key(file: path, source: "--secret-file")
            }
            if let path = environment["SWITCHBOARD_TOKEN_SECRET_FILE"] {
                return try TokenSecretText.key(file: path, source: "SWITCHBOARD_TOKEN_SECRET_FILE")
            }
            if let text = environment["SWITCHBOARD_TOKEN_SECRET"] {
                return try TokenSecretText.key(inline: text, source: "SWITCHBOARD_TOKEN_SECRET")
            }
        } catch {
            throw ValidationError(error.message)
        }
        throw ValidationError(
            "no secret: give --secret-file, SWITCHBOARD_TOKEN_SECRET_FILE or SWITCHBOARD_TOKEN_SECRET (or --private-key)")
    }
}
