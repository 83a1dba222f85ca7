"""The errors the client raises: every one a SwitchboardError carrying the spec's error code (SPEC 9)."""
from __future__ import annotations

from typing import Any, Dict, Optional

from ._generated import ERROR_CLASSES, ErrorCode


class SwitchboardError(Exception):
    """An error with the spec's error code. `kind` says where it came from (as the Swift client's kinds do):

    server (an error response: `body` is its ErrorBody), goAway (the server refused or ended the session),
    timedOut (8003), connectionLost, notConnected, connectFailed, tlsFailed (8004), unexpectedResponse (8000),
    protocolViolation (the decoder's 1xxx code), clientClosed (8004).
    """

    kind = "server"

    def __init__(self, code: int, message: str = "", *, body: Optional[Dict[str, Any]] = None) -> None:
        self.code = int(code)
        self.message = message
        self.body: Dict[str, Any] = body if body is not None else {"code": self.code, "message": message}
        head = "%s(%d)" % (self.name, self.code)
        super().__init__("%s: %s" % (head, message) if message else head)

    @property
    def name(self) -> str:
        """The code's name in the spec (`lockHeld`), or "unknown" for a code this version does not know."""
        try:
            return ErrorCode(self.code).name
        except ValueError:
            return "unknown"

    @property
    def error_class(self) -> str:
        """The code's class by its thousands digit: protocol, auth, limits, notFound, casConflict, lock,
        invalidArgument or server."""
        return ERROR_CLASSES.get(self.code // 1000, "unknown")

    @property
    def retry_after_ms(self) -> int:
        """The server's advice for 3xxx and 8xxx errors: wait at least this long before retrying (0: none)."""
        return int(self.body.get("retryAfterMs", 0))

    def __eq__(self, other: object) -> bool:
        """Errors compare by code only: the message is for people and not stable."""
        return isinstance(other, SwitchboardError) and other.code == self.code

    def __hash__(self) -> int:
        return hash(self.code)


class ServerError(SwitchboardError):
    """The server answered the request with an error response; `body` is its ErrorBody (currentRevision, key...)."""

    kind = "server"


class GoAwayError(SwitchboardError):
    """The server sent GOAWAY: it refused the session (auth, version, HELLO fields) or ended the connection."""

    kind = "goAway"

    def __init__(self, code: int, message: str = "", *, reason: Any = None, last_request_id: int = 0) -> None:
        super().__init__(code, message)
        self.reason = reason
        self.last_request_id = last_request_id


class RequestTimeout(SwitchboardError):
    """No answer in time (code 8003). A request that was sent may still have taken effect."""

    kind = "timedOut"

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.providerTimeout, message)


class ConnectionLost(SwitchboardError):
    """The connection closed while the request was in flight: its outcome is unknown (8004, or the GOAWAY's code)."""

    kind = "connectionLost"


class NotConnected(SwitchboardError):
    """The request was never sent: there was no usable connection (8004). It is safe to retry."""

    kind = "notConnected"

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.unavailable, message)


class ConnectFailed(SwitchboardError):
    """Connecting failed below the protocol: refused, unreachable, no such socket file, timed out (8004)."""

    kind = "connectFailed"

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.unavailable, message)


class TLSFailed(ConnectFailed):
    """The TLS handshake failed: the certificate is not trusted or not valid for the name, or no TLS there (8004)."""

    kind = "tlsFailed"


class UnexpectedResponse(SwitchboardError):
    """The server answered with a response this client cannot match to its request (8000)."""

    kind = "unexpectedResponse"

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.internal, message)


class ProtocolViolation(SwitchboardError):
    """The server sent bytes this client cannot read (the decoder's 1xxx code); the connection was closed."""

    kind = "protocolViolation"


class ClientClosed(SwitchboardError):
    """The client was closed (close, logout, a fatal refusal, or reconnect attempts used up) (8004)."""

    kind = "clientClosed"

    def __init__(self, message: str = "the client is closed") -> None:
        super().__init__(ErrorCode.unavailable, message)
