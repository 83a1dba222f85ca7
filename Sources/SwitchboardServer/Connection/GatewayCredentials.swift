import NIOSSL
import Synchronization

/// What a new connection is checked with: the TCP listener's TLS context and the token authority. Both can be
/// replaced while the gateway runs (SIGHUP in `switchboard serve`, through ``SwitchboardGateway/reloadTLS()`` and
/// ``SwitchboardGateway/replaceTokenSecret(_:)``): connections accepted afterwards use the new ones, connections
/// already open keep the TLS session they negotiated, and sessions already logged in stay logged in.
///
/// Whether the gateway has TLS and whether it requires tokens is fixed at start: a replacement swaps one
/// certificate or key for another, never turns either on or off.
final class GatewayCredentials: Sendable {
    private let state: Mutex<(tls: NIOSSLContext?, authority: TokenAuthority?)>

    /// Credentials with the authority of `tokenSecret` (nil: open development mode) and no TLS context yet
    /// (``setTLSContext(_:)``).
    init(tokenSecret: [UInt8]?) {
        self.state = Mutex((nil, tokenSecret.map { TokenAuthority(secret: $0) }))
    }

    /// The TLS context of connections accepted now (nil: plain TCP).
    var tlsContext: NIOSSLContext? { self.state.withLock { $0.tls } }

    /// The authority that verifies tokens now (nil: open development mode).
    var authority: TokenAuthority? { self.state.withLock { $0.authority } }

    /// Sets the TLS context of the connections accepted from now on (at start, and on a reload).
    func setTLSContext(_ context: NIOSSLContext) {
        self.state.withLock { $0.tls = context }
    }

    /// Replaces the token secret, if the gateway requires tokens.
    func replaceTokenSecret(_ secret: [UInt8]) {
        self.state.withLock { state in
            if state.authority != nil { state.authority = TokenAuthority(secret: secret) }
        }
    }
}
