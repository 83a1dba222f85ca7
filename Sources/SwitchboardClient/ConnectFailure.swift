import NIOCore
import NIOPosix

extension ClientConfiguration.Endpoint: CustomStringConvertible {
    /// The address as people write it: `127.0.0.1:7400`, `[::1]:7400`, `unix:/path/to/switchboard.sock`.
    public var description: String {
        switch self {
        case .tcp(let host, let port): return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): return "unix:\(path)"
        }
    }
}

/// Why connecting to a gateway failed, in plain words with a hint where one helps: what
/// ``SwitchboardClientError/Kind/connectFailed`` errors say instead of the socket layer's error values.
enum ConnectFailure {
    /// The message for failing to connect to `endpoint` with `error` (from the bootstrap's connect):
    /// `cannot connect to 127.0.0.1:7400: connection refused: is the gateway running?`.
    static func message(connecting endpoint: ClientConfiguration.Endpoint, failedWith error: any Error) -> String {
        "cannot connect to \(endpoint): \(Self.reason(error, endpoint: endpoint))"
    }

    /// The plain-words reason for `error`.
    static func reason(_ error: any Error, endpoint: ClientConfiguration.Endpoint) -> String {
        switch error {
        case let error as NIOConnectionError:
            // Happy eyeballs: DNS failures, then one failure per address tried; the first says enough.
            if error.dnsAError != nil || error.dnsAAAAError != nil, error.connectionErrors.isEmpty {
                return "cannot resolve the host name '\(error.host)'"
            }
            guard let first = error.connectionErrors.first else {
                return "no address to connect to for '\(error.host)'"
            }
            return Self.reason(first.error, endpoint: endpoint)
        case let error as IOError:
            return Self.reason(errno: error.errnoCode, endpoint: endpoint)
        case ChannelError.connectTimeout(let timeout):
            return "no answer within \(Self.seconds(timeout)): is the address right, and the gateway running?"
        case SocketAddressError.unixDomainSocketPathTooLong:
            return "the path is too long for a Unix socket (at most \(LibC.unixSocketPathLimit) bytes)"
        case let error as SocketAddressError.UnknownHost:
            return "cannot resolve the host name '\(error.host)'"
        case SocketAddressError.failedToParseIPString(let text):
            return "'\(text)' is not an IP address"
        default:
            return "\(error)"
        }
    }

    /// An error of an open connection in plain words: the system's text for a socket error (`connection reset by
    /// peer`), else the error's own description.
    static func plainWords(_ error: any Error) -> String {
        guard let error = error as? IOError else { return "\(error)" }
        return LibC.errorText(error.errnoCode)
    }

    private static func reason(errno code: CInt, endpoint: ClientConfiguration.Endpoint) -> String {
        let isUnix: Bool
        if case .unix = endpoint { isUnix = true } else { isUnix = false }
        switch code {
        case LibC.connectionRefused where isUnix:
            return "connection refused: the socket file exists but nothing listens on it: is the gateway running?"
        case LibC.connectionRefused:
            return "connection refused: is the gateway running?"
        case LibC.noSuchFile where isUnix:
            return "no such socket file: is the gateway running, and is this its --unix-socket path?"
        case LibC.accessDenied where isUnix, LibC.notPermitted where isUnix:
            return "permission denied: the socket file's mode (the gateway's --unix-socket-mode) does not let you in"
        case LibC.notADirectory:
            return "a part of the path is not a directory"
        case LibC.timedOut:
            return "timed out: is the address right, and the gateway running?"
        case LibC.hostUnreachable:
            return "no route to the host"
        case LibC.networkUnreachable:
            return "the network is unreachable"
        case LibC.addressNotAvailable:
            return "the address is not available on this machine"
        default:
            return LibC.errorText(code)
        }
    }

    private static func seconds(_ time: TimeAmount) -> String {
        let milliseconds = time.nanoseconds / 1_000_000
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(milliseconds) ms"
    }
}
