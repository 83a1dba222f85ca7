import Logging
import NIOCore
import SwitchboardServer
import SwitchboardWire

/// The line a gateway logs once it serves, at `info` (the default level): its version and every address it
/// listens on, so that a deployer sees in one line what started where.
///
///     switchboard started version=0.9.0 tcp=127.0.0.1:7400 tls=off unix=./switchboard.sock metrics=127.0.0.1:9100 node=off auth=tokens
struct StartLine: Sendable {
    /// The cluster node id (nil: a single gateway).
    let nodeID: String?

    /// The metadata of the line for `running`.
    func metadata(_ running: GatewayApplication.Running, tls: Bool, tokens: Bool) -> Logger.Metadata {
        [
            "version": "\(SwitchboardVersion.current)",
            "tcp": "\(running.addresses.tcp.map(Self.hostAndPort) ?? "off")",
            "tls": "\(running.addresses.tcp != nil && tls ? "on" : "off")",
            "unix": "\(running.addresses.unixSocketPath ?? "off")",
            "websocket": "\(running.addresses.webSocket.map { "\(tls ? "wss" : "ws")://\(Self.hostAndPort($0))" } ?? "off")",
            "metrics": "\(running.metricsAddress.map(Self.hostAndPort) ?? "off")",
            "node": "\(self.nodeID ?? "off")",
            "auth": "\(tokens ? "tokens" : "open development mode")",
        ]
    }

    /// Logs the line for `running`.
    func log(_ running: GatewayApplication.Running, tls: Bool, tokens: Bool, logger: Logger) {
        logger.info("switchboard started", metadata: self.metadata(running, tls: tls, tokens: tokens))
    }

    /// `127.0.0.1:7400`, `[::1]:7400`.
    static func hostAndPort(_ address: SocketAddress) -> String {
        let host = address.ipAddress ?? "\(address)"
        let port = address.port.map(String.init) ?? "?"
        return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}
