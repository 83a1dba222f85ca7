/// Plain words for a failed TLS handshake, shared by the gateway's log, the client library and the tools.
///
/// NIOSSL describes a BoringSSL failure as its error queue: `handshakeFailed(sslError([Error: 268435581
/// error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED at /path/of/the/build/…/handshake.cc:393]))`
/// — the library's internals and the path the binary was built in. ``describe(_:)`` keeps the reason only, in words
/// (`certificate verify failed`), and never a path.
public enum TLSFailureText {
    /// The reason `error` (a handshake error of NIOSSL, or any other) gives, in lower-case words without paths.
    public static func describe(_ error: any Error) -> String {
        Self.describe(String(describing: error))
    }

    /// The reason in `detail` (an error's description), in lower-case words without paths.
    public static func describe(_ detail: String) -> String {
        for (marker, words) in Self.known where detail.contains(marker) { return words }
        // Another BoringSSL reason: its name in words (`SSLV3_ALERT_HANDSHAKE_FAILURE`: "sslv3 alert handshake
        // failure").
        if let range = detail.firstRange(of: "OPENSSL_internal:") {
            let name = detail[range.upperBound...].prefix { $0.isLetter || $0.isNumber || $0 == "_" }
            if !name.isEmpty { return name.lowercased().split(separator: "_").joined(separator: " ") }
        }
        // Anything else without what could be a path: the error's name before its details.
        let name = detail.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
        return name.isEmpty ? "unknown error" : String(name)
    }

    /// Markers of the usual failures (BoringSSL reason names and NIOSSL error cases) and their words.
    private static let known: [(marker: String, words: String)] = [
        ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed"),
        ("failedToValidateHostname", "the certificate is not valid for the server name"),
        ("WRONG_VERSION_NUMBER", "peer does not speak TLS"),
        ("HTTP_REQUEST", "peer does not speak TLS"),
        ("PACKET_LENGTH_TOO_LONG", "peer does not speak TLS"),
        ("UNSUPPORTED_PROTOCOL", "the peer's TLS version is too old (TLS 1.2 or later is required)"),
        ("TLSV1_ALERT_PROTOCOL_VERSION", "the peer refused the TLS version (TLS 1.2 or later is required)"),
        ("NO_SHARED_CIPHER", "no cipher suite in common"),
        ("TLSV1_ALERT_UNKNOWN_CA", "the peer does not trust the certificate (unknown CA)"),
        ("SSLV3_ALERT_CERTIFICATE_UNKNOWN", "the peer does not trust the certificate"),
        ("SSLV3_ALERT_BAD_CERTIFICATE", "the peer refused the certificate"),
        ("CERTIFICATE_EXPIRED", "the certificate has expired"),
        ("eofDuringHandshake", "the peer closed the connection during the handshake"),
        ("uncleanShutdown", "the peer closed the connection without a TLS close"),
    ]
}
