"""One connection to the gateway: the handshake, requests matched to responses by id, heartbeats, pushes, GOAWAY.

`Client` makes one of these per session and a new one after each reconnect; it can also be used alone.
"""
from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union, cast

from . import wire
from ._generated import ErrorCode, Welcome
from .errors import (ConnectFailed, ConnectionLost, GoAwayError, NotConnected, ProtocolViolation, RequestTimeout,
                     ServerError, SwitchboardError, TLSFailed, UnexpectedResponse)
from .messages import with_defaults

log = logging.getLogger("switchboard.client")

DEFAULT_MAX_FRAME = 1 << 20
CLOSING_READ_TIMEOUT = 5.0          # how long to read towards EOF after GOAWAY or logout (SB-5.8-7)
MAX_REQUEST_ID = wire.MAX_U32


@dataclass(frozen=True)
class Endpoint:
    """Where the gateway listens: a TCP host and port, or a Unix domain socket path."""

    host: Optional[str] = None
    port: Optional[int] = None
    path: Optional[str] = None

    @staticmethod
    def tcp(host: str, port: int) -> "Endpoint":
        return Endpoint(host=host, port=port)

    @staticmethod
    def unix(path: str) -> "Endpoint":
        return Endpoint(path=path)

    @staticmethod
    def parse(value: Union["Endpoint", str, Tuple[str, int]]) -> "Endpoint":
        """An Endpoint, ("host", port), "host:port", "tcp://host:port", "unix:PATH" or "unix://PATH"."""
        if isinstance(value, Endpoint):
            return value
        if isinstance(value, tuple):
            return Endpoint.tcp(value[0], int(value[1]))
        if value.startswith("unix:"):
            path = value[len("unix:"):]
            return Endpoint.unix(path[2:] if path.startswith("//") else path)
        text = value[len("tcp://"):] if value.startswith("tcp://") else value
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError("endpoint %r is not host:port, tcp://host:port or unix:PATH" % value)
        return Endpoint.tcp(host.strip("[]"), int(port))

    def __str__(self) -> str:
        return "unix:%s" % self.path if self.path is not None else "%s:%s" % (self.host, self.port)


@dataclass
class Push:
    """A push from the server (SPEC 8): its kind (`storageEvent`, ...), its body with every field present, and
    whether its frame arrived compressed."""

    kind: str
    body: Dict[str, Any]
    compressed: bool = False


@dataclass
class Stats:
    """What a connection has carried so far."""

    frames_sent: int = 0
    frames_received: int = 0
    compressed_frames_sent: int = 0
    compressed_frames_received: int = 0
    pings_sent: int = 0


@dataclass
class _Pending:
    op: str
    future: "asyncio.Future[Dict[str, Any]]"
    abandoned: bool = False


@dataclass
class _ConnectOptions:
    ssl_context: Optional[ssl.SSLContext] = None
    server_hostname: Optional[str] = None
    connect_timeout: float = 5.0
    max_frame_size: int = DEFAULT_MAX_FRAME
    on_push: Callable[[Push], None] = lambda push: None
    on_close: Callable[["Connection", Optional[SwitchboardError]], None] = lambda c, e: None
    extra: Dict[str, Any] = field(default_factory=dict)


class Connection:
    """A session on one connection. Make it with `await Connection.open(endpoint, hello)`."""

    def __init__(self, endpoint: Endpoint, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 options: _ConnectOptions) -> None:
        self.endpoint, self._reader, self._writer, self._options = endpoint, reader, writer, options
        self.welcome: Welcome = cast(Welcome, {})
        self.stats = Stats()
        self.goaway: Optional[Dict[str, Any]] = None
        self.close_reason: Optional[SwitchboardError] = None
        self.closed = asyncio.Event()
        self._limits = wire.Limits(options.max_frame_size, options.max_frame_size, False)
        self._buffer = bytearray()
        self._pending: Dict[int, _Pending] = {}
        self._next_id = 0
        self._slots = asyncio.Semaphore(128)
        self._zlib = False
        self._threshold = 512
        self._last_sent = self._last_received = time.monotonic()
        self._ping_nonce = 0
        self._pongs: Dict[int, "asyncio.Future[None]"] = {}
        self._closing = False                       # GOAWAY received or logout sent: no new requests
        self._tasks: List["asyncio.Task[None]"] = []

    # ------------------------------------------------------------------------------------------ opening

    @classmethod
    async def open(cls, endpoint: Endpoint, hello: Dict[str, Any], options: _ConnectOptions) -> "Connection":
        """Connects, sends HELLO and reads WELCOME (or the GOAWAY refusing the session, raised as GoAwayError)."""
        try:
            reader, writer = await asyncio.wait_for(cls._open_socket(endpoint, options), options.connect_timeout)
        except asyncio.TimeoutError:
            raise ConnectFailed("cannot connect to %s: no answer within %.1f s" % (
                endpoint, options.connect_timeout)) from None
        connection = cls(endpoint, reader, writer, options)
        try:
            await asyncio.wait_for(connection._handshake(hello), options.connect_timeout)
        except asyncio.TimeoutError:
            connection._abort()
            raise ConnectFailed("%s did not answer HELLO within %.1f s" % (endpoint, options.connect_timeout)) from None
        except BaseException:
            connection._abort()
            raise
        return connection

    @staticmethod
    async def _open_socket(endpoint: Endpoint, options: _ConnectOptions) -> Tuple[asyncio.StreamReader,
                                                                                  asyncio.StreamWriter]:
        limit = 1 << 16
        try:
            if endpoint.path is not None:
                if options.ssl_context is not None:
                    raise ConnectFailed("TLS is for TCP endpoints, not %s" % endpoint)
                return await asyncio.open_unix_connection(endpoint.path, limit=limit)
            return await asyncio.open_connection(endpoint.host, endpoint.port, ssl=options.ssl_context, limit=limit,
                                                 server_hostname=(options.server_hostname or endpoint.host)
                                                 if options.ssl_context is not None else None)
        except ssl.SSLCertVerificationError as e:
            raise TLSFailed("TLS handshake failed: the gateway's certificate is not trusted or not valid for %r (%s)"
                            % (options.server_hostname or endpoint.host, e.verify_message)) from None
        except ssl.SSLError as e:
            raise TLSFailed("TLS handshake failed with %s: %s; is TLS on there?" % (endpoint, e.reason)) from None
        except FileNotFoundError:
            raise ConnectFailed("cannot connect to %s: no such socket file: is the gateway running?"
                                % endpoint) from None
        except ConnectionRefusedError:
            raise ConnectFailed("cannot connect to %s: connection refused: is the gateway running?"
                                % endpoint) from None
        except OSError as e:
            raise ConnectFailed("cannot connect to %s: %s" % (endpoint, e.strerror or e)) from None

    async def _handshake(self, hello: Dict[str, Any]) -> None:
        self._write(wire.encode({"kind": "control", "op": "hello", "body": hello}))
        while True:
            chunk = await self._reader.read(1 << 16)
            if not chunk:
                raise ConnectFailed("%s closed the connection before WELCOME" % self.endpoint)
            self._buffer += chunk
            got = self._split(self._limits)       # before WELCOME: no compression (SB-4-1)
            if got is None:
                continue
            message, _ = got
            if message["kind"] == "control" and message["op"] == "goAway":
                body = message["body"]
                raise GoAwayError(body.get("code", 0), body.get("message", ""), reason=body.get("reason"),
                                  last_request_id=body.get("lastRequestId", 0))
            if message["kind"] != "control" or message["op"] != "welcome":
                raise ProtocolViolation(ErrorCode.handshakeRequired, "the first frame from the server is not WELCOME")
            self._ready(with_defaults(wire.CONTROLS_BY_NAME["welcome"]["fields"], message["body"]))
            return

    def _ready(self, welcome: Dict[str, Any]) -> None:
        self.welcome = cast(Welcome, welcome)
        self._zlib = "zlib" in welcome["features"]
        self._limits = wire.Limits(self._options.max_frame_size, self._options.max_frame_size, self._zlib)
        self._threshold = welcome["compressThreshold"] or 512
        self._slots = asyncio.Semaphore(welcome["maxInflight"] or 128)
        self._tasks.append(asyncio.ensure_future(self._read_loop()))
        self._tasks.append(asyncio.ensure_future(self._heartbeat_loop()))

    # ------------------------------------------------------------------------------------------ requests

    @property
    def usable(self) -> bool:
        """True while new requests may be sent (no GOAWAY, no logout, not closed)."""
        return not self._closing and not self.closed.is_set()

    async def request(self, op: str, body: Dict[str, Any], timeout: Optional[float]) -> Dict[str, Any]:
        """Sends a request and returns its response body (every field present) or raises SwitchboardError."""
        if not self.usable:
            raise NotConnected("the connection to %s is closing" % self.endpoint)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            await asyncio.wait_for(self._slots.acquire(), timeout)
        except asyncio.TimeoutError:
            raise RequestTimeout("%s: no free request slot within %.1f s (%d in flight)" % (
                op, timeout or 0, len(self._pending))) from None
        if not self.usable:
            self._slots.release()
            raise NotConnected("the connection to %s is closing" % self.endpoint)
        request_id = self._take_id()
        try:
            frame = wire.encode({"kind": "request", "op": op, "requestId": request_id, "body": body},
                                compress="auto" if self._zlib and op != "renewToken" else False,
                                threshold=self._threshold)
        except BaseException:
            self._slots.release()
            raise
        future: "asyncio.Future[Dict[str, Any]]" = asyncio.get_running_loop().create_future()
        pending = _Pending(op, future)
        self._pending[request_id] = pending
        self._write(frame)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            await asyncio.wait_for(self._drain(), remaining)   # the server may have stopped reading (SB-5.9-1)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            return await asyncio.wait_for(asyncio.shield(future), remaining)
        except asyncio.TimeoutError:
            pending.abandoned = True                  # the id stays in flight until its answer (SB-2.4-4)
            raise RequestTimeout("%s: no answer within %.1f s" % (op, timeout or 0)) from None
        except asyncio.CancelledError:
            pending.abandoned = True
            raise

    def _take_id(self) -> int:
        """Counts up from 1, wrapping to 1 after 2^32-1 and skipping ids still in flight (SB-2.4-3)."""
        while True:
            self._next_id = self._next_id + 1 if self._next_id < MAX_REQUEST_ID else 1
            if self._next_id not in self._pending:
                return self._next_id

    async def ping(self, timeout: float = 5.0) -> float:
        """Sends PING and returns the round-trip time in seconds (RequestTimeout when no PONG comes in time)."""
        self._ping_nonce += 1
        nonce = self._ping_nonce
        future: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._pongs[nonce] = future
        started = time.monotonic()
        self._send_control("ping", {"nonce": nonce})
        try:
            await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            raise RequestTimeout("no PONG within %.1f s" % timeout) from None
        finally:
            self._pongs.pop(nonce, None)
        return time.monotonic() - started

    async def logout(self, timeout: float = CLOSING_READ_TIMEOUT) -> None:
        """Ends the session normally: `logout`, then reads up to the server's GOAWAY and EOF (SB-5.7, SB-5.8-7)."""
        try:
            await self.request("logout", {}, timeout)
        finally:
            self._closing = True
        try:
            await asyncio.wait_for(self.closed.wait(), timeout)
        except asyncio.TimeoutError:
            self.close(ConnectionLost(ErrorCode.unavailable, "no EOF within %.1f s after logout" % timeout))

    def close(self, reason: Optional[SwitchboardError] = None) -> None:
        """Closes the socket now (no logout: presence keeps the user for its timeout). Requests in flight fail."""
        if self.closed.is_set():
            return
        self.close_reason = reason
        self._closing = True
        self.closed.set()
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self._abort()
        pending, self._pending = self._pending, {}
        for request_id, p in pending.items():
            self._slots.release()
            if not p.future.done() and not p.abandoned:
                code = reason.code if reason is not None and reason.code != 0 else ErrorCode.unavailable
                p.future.set_exception(ConnectionLost(code, "%s: the connection closed before the answer (%s)" % (
                    p.op, reason.message if reason is not None else "closed")))
        for pong in self._pongs.values():
            if not pong.done():
                pong.set_exception(ConnectionLost(ErrorCode.unavailable, "the connection closed"))
        self._options.on_close(self, reason)

    def _abort(self) -> None:
        try:
            self._writer.close()
        except Exception:  # pragma: no cover - closing a broken transport
            pass

    # ------------------------------------------------------------------------------------------ writing

    def _write(self, frame: bytes) -> None:
        if self._writer.is_closing():
            return
        self._writer.write(frame)
        self._last_sent = time.monotonic()
        self.stats.frames_sent += 1
        length = wire.peek_varint(frame, 0, 4)
        if isinstance(length, tuple) and frame[length[1]] & wire.F_COMPRESSED:
            self.stats.compressed_frames_sent += 1

    async def _drain(self) -> None:
        """Waits while the socket's send buffer is full; a broken connection is left to the read loop to report."""
        try:
            await self._writer.drain()
        except (ConnectionError, OSError):
            pass

    def _send_control(self, op: str, body: Dict[str, Any]) -> None:
        self._write(wire.encode({"kind": "control", "op": op, "body": body}))

    # ------------------------------------------------------------------------------------------ reading

    def _split(self, limits: wire.Limits) -> Optional[Tuple[Dict[str, Any], bool]]:
        """The next message in the buffer and whether its frame was compressed, or None; raises WireError."""
        got = wire.split_frame(self._buffer, limits)
        if got is None:
            return None
        frame_bytes, size = got
        del self._buffer[:size]
        frame = wire.parse_frame(frame_bytes, "s2c", limits, size)
        self._last_received = time.monotonic()
        self.stats.frames_received += 1
        compressed = bool(frame.flags & wire.F_COMPRESSED)
        if compressed:
            self.stats.compressed_frames_received += 1
        return wire.frame_to_message(frame), compressed

    async def _read_loop(self) -> None:
        reason: Optional[SwitchboardError] = None
        try:
            chunk = b""                                 # frames that came with WELCOME are in the buffer already
            while True:
                self._buffer += chunk
                while True:
                    try:
                        got = self._split(self._limits)
                    except wire.WireError as e:
                        if e.request_id is not None and not e.fatal:
                            self._fail(e.request_id, ProtocolViolation(e.code, e.message))
                            continue
                        raise
                    if got is None:
                        break
                    self._dispatch(*got)
                if self._closing and self.goaway is not None:
                    chunk = await asyncio.wait_for(self._reader.read(1 << 16), CLOSING_READ_TIMEOUT)
                else:
                    chunk = await self._reader.read(1 << 16)
                if not chunk:
                    break
        except wire.WireError as e:
            log.error("a frame from %s cannot be read: %s", self.endpoint, e)
            reason = ProtocolViolation(e.code, e.message)
            self._send_control("goAway", {"code": e.code, "message": e.message})
        except asyncio.TimeoutError:
            reason = ConnectionLost(ErrorCode.unavailable, "no EOF within %.1f s after GOAWAY" % CLOSING_READ_TIMEOUT)
        except asyncio.CancelledError:
            return
        except OSError as e:
            reason = ConnectionLost(ErrorCode.unavailable, "read failed: %s" % e)
        if reason is None:
            if self.goaway is not None:
                g = self.goaway
                reason = GoAwayError(g["code"], g["message"], reason=g["reason"], last_request_id=g["lastRequestId"])
            else:
                reason = ConnectionLost(ErrorCode.unavailable,
                                        "the connection to %s ended without GOAWAY" % self.endpoint)
        self.close(reason)

    def _dispatch(self, message: Dict[str, Any], compressed: bool) -> None:
        kind, op = message["kind"], message["op"]
        if kind == "response":
            self._answer(message)
        elif kind == "push":
            if isinstance(op, str):                    # an unknown push code arrives as a number: ignored
                fields = wire.PUSHES_BY_NAME[op]["fields"]
                self._options.on_push(Push(op, with_defaults(fields, message["body"]), compressed))
        elif op == "ping":
            self._send_control("pong", {"nonce": message["body"].get("nonce", 0)})
        elif op == "pong":
            waiter = self._pongs.get(message["body"].get("nonce", 0))
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif op == "goAway":
            self._go_away(with_defaults(wire.CONTROLS_BY_NAME["goAway"]["fields"], message["body"]))
        else:
            raise wire.WireError(ErrorCode.badHeader, "the server sent %s while Ready" % op)

    def _answer(self, message: Dict[str, Any]) -> None:
        request_id = message["requestId"]
        pending = self._pending.pop(request_id, None)
        if pending is None:
            log.warning("a response to request %d, which is not in flight, is ignored", request_id)
            return
        self._slots.release()
        if pending.abandoned or pending.future.done():
            return
        if message["op"] != pending.op:
            pending.future.set_exception(UnexpectedResponse("%s was answered with a response of %s" % (
                pending.op, message["op"])))
        elif "error" in message:
            body = with_defaults(wire.STRUCTS["ErrorBody"], message["error"])
            pending.future.set_exception(ServerError(body["code"], body["message"], body=body))
        else:
            fields = wire.op_fields(wire.OPS_BY_NAME[pending.op], "response")
            pending.future.set_result(with_defaults(fields, message["body"]))

    def _fail(self, request_id: int, error: SwitchboardError) -> None:
        pending = self._pending.pop(request_id, None)
        if pending is not None:
            self._slots.release()
            if not pending.abandoned and not pending.future.done():
                pending.future.set_exception(error)

    def _go_away(self, body: Dict[str, Any]) -> None:
        """No new requests; requests the server never read fail now, the others wait for their answers or EOF."""
        self.goaway = body
        self._closing = True
        log.debug("GOAWAY from %s: %s", self.endpoint, body)
        last = body["lastRequestId"]
        error = GoAwayError(body["code"], body["message"], reason=body["reason"], last_request_id=last)
        for request_id in [r for r in self._pending if r > last]:
            self._fail(request_id, error)

    async def _heartbeat_loop(self) -> None:
        """PING when nothing was sent for half the interval (SB-5.6-1); a connection silent for heartbeatMs x
        heartbeatMisses is dead (SB-5.6-4)."""
        interval = (self.welcome["heartbeatMs"] or 15000) / 1000.0
        dead_after = interval * (self.welcome["heartbeatMisses"] or 3)
        try:
            while not self.closed.is_set():
                await asyncio.sleep(min(interval / 4, 1.0))
                now = time.monotonic()
                if now - self._last_received > dead_after:
                    self.close(ConnectionLost(ErrorCode.heartbeatTimeout, "nothing from %s for %.1f s" % (
                        self.endpoint, now - self._last_received)))
                    return
                if now - self._last_sent >= interval / 2 and not self._writer.is_closing():
                    self._ping_nonce += 1
                    self.stats.pings_sent += 1
                    self._send_control("ping", {"nonce": self._ping_nonce})
        except asyncio.CancelledError:
            return


def hello_body(user_id: str, token: str, device_id: str, client_name: str, client_type: Optional[Union[str, int]],
               heartbeat_ms: int, compression: bool, max_frame_size: int) -> Dict[str, Any]:
    """The HELLO of a session (SPEC 7): version 1, zlib when wanted, and a grease feature name (SB-5.2-2)."""
    features = (["zlib"] if compression else []) + ["grease.%s" % os.urandom(2).hex()]
    body: Dict[str, Any] = {"protocolVersion": 1, "features": features, "clientName": client_name}
    if token:
        body["token"] = token
    if user_id:
        body["userId"] = user_id
    if device_id:
        body["deviceId"] = device_id
    if client_type is not None:
        body["clientType"] = client_type
    if heartbeat_ms:
        body["heartbeatMs"] = heartbeat_ms
    if max_frame_size != DEFAULT_MAX_FRAME:
        body["maxFrameSize"] = max_frame_size
    return body


__all__ = ["Connection", "Endpoint", "Push", "Stats", "hello_body"]
