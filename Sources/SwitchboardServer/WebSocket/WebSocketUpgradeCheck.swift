import Foundation
import NIOHTTP1

/// What the WebSocket listener decides about an upgrade request from its head: the path, the origin and the
/// subprotocol (`Protocol/SPEC.md` §2.5).
struct WebSocketUpgradeCheck {
    /// The subprotocol of this protocol version.
    static let subprotocol = "switchboard.v1"

    let settings: ServerConfiguration.WebSocket

    /// Why the request cannot be upgraded, as the HTTP status to answer it with; nil when it may be (as far as its
    /// path, origin and subprotocol go: NIO checks the WebSocket headers themselves).
    ///
    /// Another path is 404, an origin not on the list 403, a `Sec-WebSocket-Protocol` offer without
    /// `switchboard.v1` 400.
    func refusal(_ head: HTTPRequestHead) -> (status: HTTPResponseStatus, reason: String)? {
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        guard path == self.settings.path[...] else {
            return (.notFound, "no WebSocket endpoint at \(path); it is at \(self.settings.path)")
        }
        let origin = head.headers.first(name: "origin")
        guard self.settings.origins.allows(origin) else {
            return (.forbidden, "origin \(origin ?? "") is not allowed (--websocket-origins)")
        }
        if let offered = Self.offeredSubprotocols(head), !offered.contains(Self.subprotocol) {
            return (.badRequest, "the only subprotocol is \(Self.subprotocol)")
        }
        return nil
    }

    /// The headers the 101 answer adds for an accepted request: the subprotocol when the client offered it.
    func acceptedHeaders(_ head: HTTPRequestHead) -> HTTPHeaders {
        var headers = HTTPHeaders()
        if Self.offeredSubprotocols(head) != nil {
            headers.add(name: "Sec-WebSocket-Protocol", value: Self.subprotocol)
        }
        return headers
    }

    /// The subprotocols a request offers (`Sec-WebSocket-Protocol`, comma-separated, possibly in several headers);
    /// nil when it offers none.
    static func offeredSubprotocols(_ head: HTTPRequestHead) -> [String]? {
        let offered = head.headers["sec-websocket-protocol"].flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        return offered.isEmpty ? nil : offered
    }
}
