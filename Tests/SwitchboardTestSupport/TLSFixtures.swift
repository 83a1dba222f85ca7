import Foundation

/// The committed test certificates (`Tests/SwitchboardTestSupport/Fixtures/TLS`, see the README there): a CA, a
/// server certificate it signed for `127.0.0.1` and `localhost`, and one for `localhost` only.
public enum TLSFixtures {
    /// The folder holding the fixtures, found from this source file's path.
    public static var directory: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/TLS").path
    }

    /// The CA certificate (PEM): the trust root of a test client.
    public static var caCertificatePath: String { Self.directory + "/ca.pem" }
    /// The server certificate (PEM), for `--tls-cert`.
    public static var serverCertificatePath: String { Self.directory + "/server.pem" }
    /// A server certificate (PEM) with the same key for the name `localhost` only (no IP address).
    public static var dnsOnlyServerCertificatePath: String { Self.directory + "/server-dns-only.pem" }
    /// The server certificates' private key (PEM), for `--tls-key`.
    public static var serverKeyPath: String { Self.directory + "/server-key.pem" }

    /// The CA certificate's PEM text.
    public static func caCertificatePEM() throws -> String {
        try String(contentsOfFile: Self.caCertificatePath, encoding: .utf8)
    }
}
