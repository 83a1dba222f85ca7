import Foundation
import SwitchboardServer

/// Turns the configured token secret into the HMAC key the gateway verifies tokens with, refusing one too short to
/// be a key (``TokenSecretText``): `switchboard serve` at start and on SIGHUP, and `switchboard token`.
enum TokenSecretLoader {
    /// The key the secret gives: the inline secret's UTF-8 bytes, or the file's contents without the whitespace
    /// and newlines around them.
    ///
    /// - Parameter source: where the secret was given (``ServeSettings/tokenSecretSource``), for the messages.
    /// - Throws: ``SettingsError/unusableTokenSecret(_:)`` naming the source when the file cannot be read or the
    ///   key is shorter than ``TokenAuthority/minimumSecretBytes``.
    static func load(_ secret: ServeSettings.TokenSecret, source: String) throws(SettingsError) -> [UInt8] {
        do {
            switch secret {
            case .inline(let text): return try TokenSecretText.key(inline: text, source: source)
            case .file(let path): return try TokenSecretText.key(file: path, source: source)
            }
        } catch {
            throw .unusableTokenSecret(error.message)
        }
    }

    /// The key of `settings`' token secret, or nil without one (open development mode).
    ///
    /// - Throws: as ``load(_:source:)``.
    static func load(of settings: ServeSettings) throws(SettingsError) -> [UInt8]? {
        guard let secret = settings.tokenSecret else { return nil }
        return try Self.load(secret, source: settings.tokenSecretSource ?? "the token secret")
    }
}
