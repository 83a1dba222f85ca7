import NIOSSL
import Synchronization

/// What a new connection is checked with: the TCP listener's TLS context, the token authority and the login policy.
/// Each can be replaced while the gateway runs (SIGHUP in `switchboard serve`, through
/// ``SwitchboardGateway/reloadTLS()`` and ``SwitchboardGateway/replaceTokenKeys(secret:keys:)``): connections
/// accepted afterwards use the new ones, connections already open keep the TLS session they negotiated, and sessions
/// already logged in stay logged in.
///
/// Whether the gateway has TLS and whether it requires tokens is fixed at start: a replacement swaps one
/// certificate, key or set of token keys for another, never turns either on or off.
final class GatewayCredentials: Sendable {
    private let state: Mutex<(tls: NIOSSLContext?, authority: TokenAuthority?, policy: (any LoginPolicy)?)>

    /// Credentials with the authority of `configuration`'s token secret and keys (nil when it has neither: open
    /// development mode) and no TLS context yet (``setTLSContext(_:)``).
    init(_ configuration: ServerConfiguration) {
        let authority =
            configuration.requiresTokens
            ? TokenAuthority(secret: configuration.tokenSecret, keys: configuration.tokenKeys) : nil
        self.state = Mutex((nil, authority, nil))
    }

    /// The TLS context of connections accepted now (nil: plain TCP).
    var tlsContext: NIOSSLContext? { self.state.withLock { $0.tls } }

    /// The authority that verifies tokens now (nil: open development mode).
    var authority: TokenAuthority? { self.state.withLock { $0.authority } }

    /// What refuses logins after their token verified (nil: nothing).
    var loginPolicy: (any LoginPolicy)? {
        get { self.state.withLock { $0.policy } }
        set { self.state.withLock { $0.policy = newValue } }
    }

    /// Sets the TLS context of the connections accepted from now on (at start, and on a reload).
    func setTLSContext(_ context: NIOSSLContext) {
        self.state.withLock { $0.tls = context }
    }

    /// Replaces the default key's secret (the other keys stay), if the gateway requires tokens.
    func replaceTokenSecret(_ secret: [UInt8]) {
        self.state.withLock { state in
            guard let authority = state.authority else { return }
            state.authority = authority.replacingSecret(secret)
        }
    }

    /// Replaces the token secret and keys, if the gateway requires tokens.
    func replaceKeys(secret: [UInt8]?, keys: [String: TokenKey]) {
        self.state.withLock { state in
            if state.authority != nil { state.authority = TokenAuthority(secret: secret, keys: keys) }
        }
    }
}
