import Foundation
import Logging
import SwitchboardServer

/// SIGHUP: the running gateway reads its TLS certificate and key files (`--tls-cert`, `--tls-key`), its token
/// secret file (`--token-secret-file`) and its token key files (`--token-key`, `--jwks-file`) again, without
/// dropping a connection.
///
/// Connections accepted afterwards get the new certificate, and logins and token renewals are verified with the new
/// secret and keys (a token signed with a key no longer there is refused from then on); connections and sessions
/// already open stay. Each part that cannot be reloaded (a file that cannot be read, a certificate or key that
/// cannot be used, a secret shorter than ``TokenAuthority/minimumSecretBytes``) is logged as an error and keeps
/// what it had (the token secret and keys are one part). An
/// inline secret (`--token-secret`, `SWITCHBOARD_TOKEN_SECRET`, the configuration file's `token-secret`) is not
/// read again: the process was given it once.
enum CredentialReload {
    nonisolated(unsafe) static var sources: [any DispatchSourceSignal] = []

    /// Reloads on every SIGHUP from now on (SIGHUP must be ignored already, so that it does not end the process).
    static func install(gateway: SwitchboardGateway, settings: ServeSettings, logger: Logger) {
        let source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: DispatchQueue(label: "switchboard.sighup"))
        source.setEventHandler { Self.reload(gateway: gateway, settings: settings, logger: logger) }
        source.resume()
        Self.sources.append(source)
    }

    /// Reloads what can be reloaded; what fails keeps its previous value.
    static func reload(gateway: SwitchboardGateway, settings: ServeSettings, logger: Logger) {
        var reloaded: [String] = []
        var failed = false
        do {
            if try gateway.reloadTLS() { reloaded.append("tls") }
        } catch {
            failed = true
            logger.error("SIGHUP: the TLS certificate and key were not reloaded; the previous ones stay: \(error)")
        }
        let secretFromFile = if case .file = settings.tokenSecret { true } else { false }
        if secretFromFile || settings.tokenKeys != nil || settings.jwksFile != nil {
            // All or nothing: a secret or key file that cannot be used keeps every previous key.
            do {
                let secret = try TokenSecretLoader.load(of: settings)
                let keys = try TokenKeyLoader.load(of: settings)
                if gateway.replaceTokenKeys(secret: secret, keys: keys) {
                    if secretFromFile { reloaded.append("token-secret-file") }
                    if settings.tokenKeys != nil || settings.jwksFile != nil {
                        reloaded.append("token keys (\(keys.keys.sorted().joined(separator: ", ")))")
                    }
                }
            } catch {
                failed = true
                logger.error("SIGHUP: the token secret and keys were not reloaded; the previous ones stay: \(error)")
            }
        }
        let what = reloaded.isEmpty ? "nothing" : reloaded.joined(separator: ", ")
        if failed {
            logger.warning("SIGHUP: reloaded \(what) only")
        } else {
            logger.notice("SIGHUP: reloaded \(what)")
        }
    }
}
