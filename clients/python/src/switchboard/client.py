"""`Client`: a session that survives lost connections, with a typed async method for every operation."""
from __future__ import annotations

import asyncio
import collections
import logging
import random
import ssl
from dataclasses import dataclass, field
from typing import (Any, AsyncIterator, Awaitable, Callable, Deque, Dict, Generic, List, Optional, Set, Tuple,
                    TypeVar, Union)

from ._generated import ErrorCode, Operations, Welcome
from .connection import DEFAULT_MAX_FRAME, Connection, Endpoint, Push, Stats, _ConnectOptions, hello_body
from .errors import (ClientClosed, ConnectFailed, ConnectionLost, GoAwayError, NotConnected, ProtocolViolation,
                     RequestTimeout, SwitchboardError)

log = logging.getLogger("switchboard.client")

__version__ = "0.1.0"

TokenProvider = Callable[[], Awaitable[str]]
"""Returns a fresh token for each new session (and for renewals when the server says the token expires soon)."""


@dataclass(frozen=True)
class ReconnectPolicy:
    """Backoff between reconnect attempts: initial_delay doubling (multiplier) to max_delay, +/- jitter (a fraction),
    at most max_attempts attempts in a row (None: no limit). `ReconnectPolicy.never()` does not reconnect."""

    initial_delay: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 30.0
    jitter: float = 0.2
    max_attempts: Optional[int] = None

    @staticmethod
    def never() -> "ReconnectPolicy":
        return ReconnectPolicy(max_attempts=0)

    def delay(self, attempt: int) -> float:
        """The wait before attempt `attempt` (1, 2, ...)."""
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 1))
        return max(0.0, base * (1 + random.uniform(-self.jitter, self.jitter)))


@dataclass
class ConnectionEvent:
    """What happened to the client's connection: `connected` (welcome), `disconnected` (error, will_reconnect),
    `reconnecting` (attempt, delay, error), `restored` (restored: the subscriptions made again, failed: those the
    new session refused, with the error), `tokenRenewed` and `tokenRenewalFailed` (error): the client renewed the
    session's token from its token provider when the server said it expires soon."""

    kind: str
    welcome: Optional[Welcome] = None
    error: Optional[SwitchboardError] = None
    will_reconnect: bool = False
    attempt: int = 0
    delay: float = 0.0
    restored: List[Tuple[str, Dict[str, Any]]] = field(default_factory=list)
    failed: List[Tuple[str, Dict[str, Any], SwitchboardError]] = field(default_factory=list)
    #: `restored`: the answer of the resumed admin change stream (subscribeChanges), if one was open; its `gap`
    #: says the changes missed could not all be replayed and the app re-reads the state it follows.
    change_stream: Optional[Dict[str, Any]] = None
    #: `restored`: the answer of the resume of online-only events (resumeEvents, SPEC SB-13.4-9), if the client had
    #: a position to resume from: the `replayed` events follow; `gap` says some may be missing. None otherwise, or
    #: when the request failed.
    events: Optional[Dict[str, Any]] = None


T = TypeVar("T")


class Stream(Generic[T]):
    """An async iterator over what the client receives from the moment it was made until the client closes.

    It buffers up to `limit` elements its consumer has not read yet and beyond that drops the oldest (`dropped`
    counts them). `await stream.next(timeout)` reads one element or raises asyncio.TimeoutError; `close()` ends it.
    """

    def __init__(self, owner: "Client", accepts: Callable[[T], bool], limit: int) -> None:
        self._owner, self._accepts, self._limit = owner, accepts, limit
        self._items: Deque[T] = collections.deque()
        self._wakeup = asyncio.Event()
        self._ended = False
        self.dropped = 0

    def _offer(self, item: T) -> None:
        if self._ended or not self._accepts(item):
            return
        if len(self._items) >= self._limit:
            self._items.popleft()
            self.dropped += 1
        self._items.append(item)
        self._wakeup.set()

    def _end(self) -> None:
        self._ended = True
        self._wakeup.set()

    def close(self) -> None:
        """Stops this stream (the client keeps running)."""
        self._end()
        self._owner._forget(self)

    def __aiter__(self) -> "Stream[T]":
        return self

    async def __anext__(self) -> T:
        while not self._items:
            if self._ended:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._items.popleft()

    async def next(self, timeout: Optional[float] = None) -> T:
        """The next element; asyncio.TimeoutError after `timeout` seconds, ClientClosed when the stream ended."""
        try:
            return await asyncio.wait_for(self.__anext__(), timeout)
        except StopAsyncIteration:
            raise ClientClosed("the stream ended") from None

    def __enter__(self) -> "Stream[T]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Ledger:
    """What the app subscribed to through the client, so a new session can make it again (SPEC 13: subscriptions
    belong to a session). Event subscriptions are kept by the server for the user and need no restoring."""

    def __init__(self) -> None:
        self.channels: Dict[Tuple[str, Any], Dict[str, Any]] = {}
        self.user_metadata: Dict[str, Dict[str, Any]] = {}
        self.profile_users: Set[str] = set()
        self.profile_groups: Set[str] = set()
        self.provider: Optional[Dict[str, Any]] = None
        self.changes: Optional[Dict[str, Any]] = None       # subscribeChanges, resuming after the last change seen
        self.will: Optional[Dict[str, Any]] = None          # setWill: registered again on a new session
        # set -> majorRevision of the last storage event received (SPEC SB-13.1-8)
        self.revisions: Dict[Tuple[str, str, str], int] = {}
        # (epoch, position) of the last online-only event received (SPEC SB-13.4-9); None: nothing to resume
        self.event_replay: Optional[Tuple[int, int]] = None

    def note_event_position(self, epoch: int, position: int) -> None:
        """A position of the server's numbering of online-only events: in the same epoch the greater counts,
        another epoch replaces it."""
        if not epoch:
            return
        if self.event_replay is not None and self.event_replay[0] == epoch:
            self.event_replay = (epoch, max(self.event_replay[1], position))
        else:
            self.event_replay = (epoch, position)

    def note_events(self, events: List[Dict[str, Any]]) -> None:
        """A subscribedEvents push arrived: a new session asks for the online-only events after the last one."""
        for event in events:
            if event.get("epoch"):
                self.note_event_position(event["epoch"], event.get("position", 0))

    @staticmethod
    def set_key(storage_type: Any, target: str, channel_type: Any = "message") -> Tuple[str, str, str]:
        """A set's key as a storage event names it (enums by name or number)."""
        channel = storage_type in ("channel", 2)
        kind = {1: "message", 2: "stream"}.get(channel_type, channel_type) if channel else ""
        return ("channel" if channel else "user", str(kind or "message") if channel else "", target)

    def note_storage_event(self, event: Dict[str, Any]) -> None:
        """A storage event arrived: a new session's subscription to its set resumes from its majorRevision."""
        key = self.set_key(event.get("storageType", "user"), event.get("target", ""), event.get("channelType", "message"))
        self.revisions[key] = event.get("majorRevision", 0)

    def note_change(self, position: int) -> None:
        """A change push arrived: a new session resumes the admin change stream after it."""
        if self.changes is not None:
            self.changes["resumeFrom"] = max(self.changes.get("resumeFrom", 0), position)

    def record(self, op: str, body: Dict[str, Any], response: Optional[Dict[str, Any]] = None) -> None:
        """Called after a successful request."""
        if op == "subscribeEvent" and response is not None:
            self.note_event_position(response.get("epoch", 0), response.get("position", 0))
            return
        if op == "resumeEvents" and response is not None:
            # Same epoch without a gap: the replayed events follow and move the point on.
            if response.get("epoch") != body.get("epoch", 0) or response.get("gap"):
                self.event_replay = None
                self.note_event_position(response.get("epoch", 0), response.get("position", 0))
            return
        if op == "subscribeChanges" and response is not None:
            same_run = self.changes is not None and self.changes.get("resumeEpoch") == response["epoch"]
            seen = self.changes.get("resumeFrom", 0) if same_run and self.changes is not None else 0
            changes = dict(body)
            if body.get("resumeEpoch", 0) == response["epoch"] and not response["gap"]:
                changes["resumeFrom"] = max(body.get("resumeFrom", 0), seen)   # the replay follows and moves it on
            else:
                changes["resumeFrom"] = max(response["position"], seen)
            changes["resumeEpoch"] = response["epoch"]
            self.changes = changes
            return
        if op == "unsubscribeChanges":
            self.changes = None
            return
        if op == "setWill":
            self.will = dict(body) if body.get("actions") else None
            return
        channel_key = (body.get("channel", ""), body.get("channelType", "message"))
        if op == "subscribeChannel":
            self.channels[channel_key] = dict(body, sinceRevision=0)
        elif op == "unsubscribeChannel":
            self.channels.pop(channel_key, None)
            self.revisions.pop(self.set_key("channel", channel_key[0], channel_key[1]), None)
        elif op == "subscribeUserMetadata":
            self.user_metadata[body.get("userId", "")] = dict(body, sinceRevision=0)
        elif op == "unsubscribeUserMetadata":
            self.user_metadata.pop(body.get("userId", ""), None)
        elif op == "subscribeProfiles":
            self.profile_users |= set(body.get("userIds", []))
            self.profile_groups |= set(body.get("groupIds", []))
        elif op == "unsubscribeProfiles":
            self.profile_users -= set(body.get("userIds", []))
            self.profile_groups -= set(body.get("groupIds", []))
        elif op == "registerProvider":
            self.provider = dict(body) if body.get("kinds") else None

    def requests(self, own_user_id: str = "") -> List[Tuple[str, Dict[str, Any]]]:
        """The requests that make every recorded subscription again; metadata subscriptions resume from the last
        storage event received of their set (own_user_id names the set of a subscription to the caller's own)."""
        out: List[Tuple[str, Dict[str, Any]]] = []
        for b in self.channels.values():
            if b.get("withMetadata"):
                key = self.set_key("channel", b.get("channel", ""), b.get("channelType", "message"))
                b = dict(b, sinceRevision=self.revisions.get(key, 0))
            out.append(("subscribeChannel", b))
        for b in self.user_metadata.values():
            key = self.set_key("user", b.get("userId") or own_user_id)
            out.append(("subscribeUserMetadata", dict(b, sinceRevision=self.revisions.get(key, 0))))
        if self.profile_users or self.profile_groups:
            out.append(("subscribeProfiles", {"userIds": sorted(self.profile_users),
                                              "groupIds": sorted(self.profile_groups)}))
        if self.provider is not None:
            out.append(("registerProvider", self.provider))
        if self.changes is not None:
            out.append(("subscribeChanges", dict(self.changes)))
        if self.will is not None:
            out.append(("setWill", dict(self.will)))
        return out

    def drop(self, op: str, body: Dict[str, Any]) -> None:
        """Stops tracking a subscription the new session refused."""
        undo = {"subscribeChannel": "unsubscribeChannel", "subscribeUserMetadata": "unsubscribeUserMetadata",
                "subscribeProfiles": "unsubscribeProfiles"}
        if op in undo:
            self.record(undo[op], body)
        elif op == "registerProvider":
            self.provider = None
        elif op == "subscribeChanges":
            self.changes = None
        elif op == "setWill":
            self.will = None


FATAL_GOAWAY_CLASSES = (2, 7)           # auth and HELLO fields: another attempt would be refused the same way


class Client(Operations):
    """A Switchboard session: `async with Client("127.0.0.1:7400", "tony") as client: ...`.

    endpoint: "host:port", "tcp://host:port", ("host", port), "unix:PATH" or an Endpoint. user_id: the user in open
    development mode (with a token: empty, or the token's user). token or token_provider: the login token (a
    provider is asked again for each new session). tls: True (the system's CAs), an ssl.SSLContext, or None (plain
    TCP). Times are in seconds.
    """

    def __init__(self, endpoint: Union[Endpoint, str, Tuple[str, int]], user_id: str = "",
                 token: Optional[str] = None, *, token_provider: Optional[TokenProvider] = None,
                 device_id: str = "", client_type: Optional[Union[str, int]] = None,
                 client_name: str = "switchboard-python/" + __version__,
                 tls: Union[bool, ssl.SSLContext, None] = None, server_hostname: Optional[str] = None,
                 request_timeout: float = 10.0, connect_timeout: float = 5.0, heartbeat_ms: int = 0,
                 compression: bool = True, max_frame_size: int = DEFAULT_MAX_FRAME,
                 reconnect: ReconnectPolicy = ReconnectPolicy(), wait_while_disconnected: bool = True,
                 stream_buffer_limit: int = 10000) -> None:
        self.endpoint = Endpoint.parse(endpoint)
        self.user_id, self.token, self.token_provider = user_id, token or "", token_provider
        self.device_id, self.client_type, self.client_name = device_id, client_type, client_name
        if tls is True:
            self._ssl: Optional[ssl.SSLContext] = ssl.create_default_context()
        elif isinstance(tls, ssl.SSLContext):
            self._ssl = tls
        else:
            self._ssl = None
        self.server_hostname = server_hostname
        self.request_timeout, self.connect_timeout = request_timeout, connect_timeout
        self.heartbeat_ms, self.compression, self.max_frame_size = heartbeat_ms, compression, max_frame_size
        self.reconnect_policy, self.wait_while_disconnected = reconnect, wait_while_disconnected
        self.stream_buffer_limit = stream_buffer_limit
        self.state = "idle"              # idle, connecting, connected, reconnecting, closed
        self.close_reason: Optional[SwitchboardError] = None
        self._connection: Optional[Connection] = None
        self._ready = asyncio.Event()
        self._closed_event = asyncio.Event()
        self._ledger = _Ledger()
        self._push_streams: List[Stream[Push]] = []
        self._event_streams: List[Stream[ConnectionEvent]] = []
        self._supervisor: Optional["asyncio.Task[None]"] = None
        self._stats = Stats()
        self._background: Set["asyncio.Task[Any]"] = set()

    # ------------------------------------------------------------------------------------------ lifecycle

    async def connect(self) -> Welcome:
        """Makes the first session; raises its error (ConnectFailed, GoAwayError...) if it cannot be made."""
        if self.state == "closed":
            raise ClientClosed()
        if self._connection is not None and self._connection.usable:
            return self._connection.welcome
        self.state = "connecting"
        try:
            connection = await self._open()
        except SwitchboardError as e:
            self.state = "idle"
            raise e
        self._adopt(connection)
        self._emit(ConnectionEvent("connected", welcome=connection.welcome))
        return connection.welcome

    async def __aenter__(self) -> "Client":
        await self.connect()
        return self

    async def __aexit__(self, kind: Optional[type], error: Optional[BaseException], tb: Any) -> None:
        if error is None:
            await self.logout()
        else:
            await self.close()

    async def logout(self, *, timeout: Optional[float] = None) -> None:
        """Ends the session normally (others see the user leave at once) and closes the client; waits up to
        `timeout` (default 5 s) for the server's GOAWAY and EOF."""
        connection = self._connection
        self._finish(None)
        if connection is not None and connection.usable:
            try:
                await connection.logout(5.0 if timeout is None else timeout)
            except SwitchboardError as e:
                log.debug("logout: %s", e)
                connection.close()
        await self._stop_supervisor()

    async def close(self) -> None:
        """Drops the connection without logging out (presence keeps the user for its timeout); the client ends."""
        connection = self._connection
        self._finish(None)
        if connection is not None:
            connection.close()
        await self._stop_supervisor()

    async def wait_closed(self) -> None:
        """Returns when the client has ended (close, logout, a fatal refusal, reconnect attempts used up)."""
        await self._closed_event.wait()

    @property
    def welcome(self) -> Optional[Welcome]:
        """The current session's WELCOME (None before the first session)."""
        return self._connection.welcome if self._connection is not None else None

    @property
    def event_replay_position(self) -> Optional[Tuple[int, int]]:
        """Where the client stands in the server's numbering of online-only events: (epoch, greatest position
        received) from the events and the subscribeEvent answers, or None; a reconnect resumes from it."""
        return self._ledger.event_replay

    @property
    def connection(self) -> Optional[Connection]:
        """The current connection (it changes after each reconnect)."""
        return self._connection

    @property
    def stats(self) -> Stats:
        """Frames sent and received over every connection of this client so far."""
        total = Stats(**vars(self._stats))
        if self._connection is not None and not self._connection.closed.is_set():
            for k, v in vars(self._connection.stats).items():
                setattr(total, k, getattr(total, k) + v)
        return total

    # ------------------------------------------------------------------------------------------ calls

    async def call(self, op: str, body: Dict[str, Any], *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Sends any request by op name with a JSON body (camelCase fields, SPEC 10) and returns the response body
        with every field present. Waits for a session while reconnecting (up to the timeout)."""
        timeout = self.request_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if op == "logout":
            await self.logout()
            return {}
        while True:
            if self.state == "closed":
                raise ClientClosed("%s: the client is closed%s" % (
                    op, " (%s)" % self.close_reason if self.close_reason is not None else ""))
            connection = self._connection
            if not self._ready.is_set() or connection is None or not connection.usable:
                if not self.wait_while_disconnected or self.state == "idle":
                    raise NotConnected("%s: not connected to %s" % (op, self.endpoint))
                remaining = deadline - loop.time()
                # After a GOAWAY the connection is still open until EOF: wait for it to end, then for the next one.
                waiting = (connection.closed.wait() if connection is not None and self._ready.is_set()
                           else self._wait_ready_or_closed())
                try:
                    await asyncio.wait_for(waiting, max(0.0, remaining))
                except asyncio.TimeoutError:
                    raise RequestTimeout("%s: no session with %s within %.1f s" % (
                        op, self.endpoint, timeout)) from None
                continue
            response = await connection.request(op, body, max(0.0, deadline - loop.time()))
            self._ledger.record(op, body, response)
            return response

    async def _wait_ready_or_closed(self) -> None:
        ready = asyncio.ensure_future(self._ready.wait())
        closed = asyncio.ensure_future(self._closed_event.wait())
        try:
            await asyncio.wait([ready, closed], return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            closed.cancel()

    async def ping(self, timeout: float = 5.0) -> float:
        """Round-trip time of a PING on the current connection, in seconds."""
        if self._connection is None or not self._connection.usable:
            raise NotConnected("not connected to %s" % self.endpoint)
        return await self._connection.ping(timeout)

    # ------------------------------------------------------------------------------------------ streams

    def pushes(self, *kinds: str, limit: Optional[int] = None) -> Stream[Push]:
        """A stream of the pushes of these kinds (all kinds when none is named: storageEvent, lockEvent,
        presenceEvent, subscribedEvents, profileChanged, providerRequest, serverNotice, unsubscribed, change,
        channelBroadcast) that arrive from now on, over whichever connection is current. Make it before the request whose pushes it should
        see."""
        wanted = set(kinds)
        stream: Stream[Push] = Stream(self, lambda p: not wanted or p.kind in wanted, limit or self.stream_buffer_limit)
        if self.state == "closed":
            stream._end()
        else:
            self._push_streams.append(stream)
        return stream

    def connection_events(self) -> Stream[ConnectionEvent]:
        """A stream of ConnectionEvents from now on; it ends after the client's last `disconnected`."""
        stream: Stream[ConnectionEvent] = Stream(self, lambda e: True, self.stream_buffer_limit)
        if self.state == "closed":
            stream._end()
        else:
            self._event_streams.append(stream)
        return stream

    def _forget(self, stream: Stream[Any]) -> None:
        for streams in (self._push_streams, self._event_streams):
            if stream in streams:
                streams.remove(stream)

    def _on_push(self, push: Push) -> None:
        if push.kind == "change":
            self._ledger.note_change(push.body["position"])
        if push.kind == "storageEvent":
            self._ledger.note_storage_event(push.body)
        if push.kind == "subscribedEvents":
            self._ledger.note_events(push.body.get("events", []))
        for stream in self._push_streams:
            stream._offer(push)
        if push.kind == "serverNotice" and push.body["code"] == ErrorCode.tokenExpired and self.token_provider:
            task = asyncio.ensure_future(self._renew_token())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _renew_token(self) -> None:
        assert self.token_provider is not None
        try:
            await self.renew_token(await self.token_provider())
        except SwitchboardError as e:  # the session goes on with its token; the server ends it at expiry
            log.warning("token renewal failed: %s", e)
            self._emit(ConnectionEvent("tokenRenewalFailed", error=e))
            return
        self._emit(ConnectionEvent("tokenRenewed"))

    def _emit(self, event: ConnectionEvent) -> None:
        for stream in self._event_streams:
            stream._offer(event)

    # ------------------------------------------------------------------------------------------ sessions

    async def _open(self) -> Connection:
        token = await self.token_provider() if self.token_provider is not None else self.token
        hello = hello_body(self.user_id, token, self.device_id, self.client_name, self.client_type,
                           self.heartbeat_ms, self.compression, self.max_frame_size)
        options = _ConnectOptions(ssl_context=self._ssl, server_hostname=self.server_hostname,
                                  connect_timeout=self.connect_timeout, max_frame_size=self.max_frame_size,
                                  on_push=self._on_push, on_close=self._on_close)
        return await Connection.open(self.endpoint, hello, options)

    def _adopt(self, connection: Connection) -> None:
        self._connection = connection
        self.state = "connected"
        self._ready.set()
        if self._supervisor is None:
            self._supervisor = asyncio.ensure_future(self._supervise())

    def _on_close(self, connection: Connection, reason: Optional[SwitchboardError]) -> None:
        if connection is self._connection:
            self._ready.clear()
            for k, v in vars(connection.stats).items():
                setattr(self._stats, k, getattr(self._stats, k) + v)

    def _finish(self, reason: Optional[SwitchboardError]) -> None:
        """The client ends: no more sessions; streams end after a last `disconnected`."""
        if self.state == "closed":
            return
        self.state = "closed"
        self.close_reason = reason
        self._ready.clear()
        self._emit(ConnectionEvent("disconnected", error=reason, will_reconnect=False))
        for stream in self._push_streams + self._event_streams:
            stream._end()
        self._push_streams, self._event_streams = [], []
        self._closed_event.set()

    async def _stop_supervisor(self) -> None:
        task, self._supervisor = self._supervisor, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    @staticmethod
    def _fatal(error: SwitchboardError) -> bool:
        """Refusals another attempt would meet again: auth errors, 1008 unsupportedVersion, HELLO fields (7xxx)."""
        return isinstance(error, GoAwayError) and (error.code // 1000 in FATAL_GOAWAY_CLASSES
                                                   or error.code == ErrorCode.unsupportedVersion)

    async def _supervise(self) -> None:
        """Waits for the current connection to end, then reconnects with backoff and restores subscriptions."""
        try:
            while self.state != "closed":
                connection = self._connection
                assert connection is not None
                await connection.closed.wait()
                if self.state == "closed":
                    return
                reason = connection.close_reason or ConnectionLost(ErrorCode.unavailable, "the connection ended")
                if isinstance(reason, GoAwayError) and reason.code == 0:
                    self._finish(None)                       # the session ended normally (logout elsewhere)
                    return
                policy = self.reconnect_policy
                will_reconnect = policy.max_attempts != 0 and not isinstance(reason, ProtocolViolation)
                log.warning("connection to %s lost: %s%s", self.endpoint, reason,
                            "; reconnecting" if will_reconnect else "")
                if not will_reconnect:
                    self._finish(reason)
                    return
                self.state = "reconnecting"
                self._emit(ConnectionEvent("disconnected", error=reason, will_reconnect=True))
                await self._reconnect(reason)
        except asyncio.CancelledError:
            return

    async def _reconnect(self, cause: SwitchboardError) -> None:
        policy = self.reconnect_policy
        attempt = 0
        while self.state != "closed":
            attempt += 1
            if policy.max_attempts is not None and attempt > policy.max_attempts:
                self._finish(cause)
                return
            delay = policy.delay(attempt)
            self._emit(ConnectionEvent("reconnecting", error=cause, attempt=attempt, delay=delay))
            log.info("reconnecting to %s: attempt %d in %.2f s after %s", self.endpoint, attempt, delay, cause)
            await asyncio.sleep(delay)
            if self.state == "closed":
                return
            try:
                connection = await self._open()
                if self.state == "closed":                  # closed while this attempt was under way
                    connection.close()
                    return
            except SwitchboardError as e:
                if self._fatal(e):
                    log.error("%s refused the session for good: %s", self.endpoint, e)
                    self._finish(e)
                    return
                cause = e
                continue
            restored, failed, change_stream, events = await self._restore(connection)
            if connection.closed.is_set():
                cause = connection.close_reason or cause
                continue
            self._adopt(connection)
            log.info("reconnected to %s: session %s", self.endpoint, connection.welcome["sessionId"])
            self._emit(ConnectionEvent("connected", welcome=connection.welcome))
            self._emit(ConnectionEvent(
                "restored", restored=restored, failed=failed, change_stream=change_stream, events=events))
            return

    async def _restore(self, connection: Connection) -> Tuple[List[Tuple[str, Dict[str, Any]]],
                                                               List[Tuple[str, Dict[str, Any], SwitchboardError]],
                                                               Optional[Dict[str, Any]], Optional[Dict[str, Any]]]:
        restored: List[Tuple[str, Dict[str, Any]]] = []
        failed: List[Tuple[str, Dict[str, Any], SwitchboardError]] = []
        change_stream: Optional[Dict[str, Any]] = None
        for op, body in self._ledger.requests((connection.welcome or {}).get("userId") or self.user_id):
            try:
                response = await connection.request(op, body, self.request_timeout)
                restored.append((op, body))
                if op == "subscribeChanges":
                    change_stream = response
                    self._ledger.record(op, body, response)
            except (ConnectionLost, NotConnected, RequestTimeout, ConnectFailed):
                break                                           # this connection is gone too: the next one retries
            except SwitchboardError as e:
                log.warning("%s %s was not restored: %s", op, body, e)
                failed.append((op, body, e))
                self._ledger.drop(op, body)
        # The online-only events missed meanwhile (SPEC SB-13.4-9), once the subscriptions are back.
        events: Optional[Dict[str, Any]] = None
        point = self._ledger.event_replay
        if point is not None and not connection.closed.is_set():
            body = {"epoch": point[0], "after": point[1]}
            try:
                events = await connection.request("resumeEvents", body, self.request_timeout)
                self._ledger.record("resumeEvents", body, events)
            except SwitchboardError as e:
                log.warning("online-only events were not resumed: %s", e)
                events = None
        return restored, failed, change_stream, events


class MetadataSetCopy:
    """An app's copy of one metadata set kept from its storage events, resumed snapshots included (SPEC SB-13.1-7,
    SB-13.1-8): a whole snapshot replaces it; a resumed one (resumedFrom > 0) removes its removedKeys, then overwrites
    or appends its items; set and update overwrite or append; remove and expired delete the keys, or empty the copy
    when they name none (the whole set was removed or expired, SB-13.1-9, SB-13.1-10). `major_revision` is what to
    resume from (sinceRevision), `expires_at_ms` when the whole set expires (0: no TTL)."""

    def __init__(self) -> None:
        self.major_revision = 0
        self.expires_at_ms = 0
        self.items: List[Dict[str, Any]] = []

    def apply(self, event: Dict[str, Any]) -> None:
        """Applies a storageEvent push body of this set."""
        kind = event.get("eventType", "snapshot")
        if kind == "snapshot" and event.get("resumedFrom", 0) > 0:
            removed = set(event.get("removedKeys", []))
            self.items = [item for item in self.items if item["key"] not in removed]
            self._write(event.get("items", []))
        elif kind == "snapshot":
            self.items = list(event.get("items", []))
        elif kind in ("set", "update"):
            self._write(event.get("items", []))
        elif kind in ("remove", "expired"):
            removed = {item["key"] for item in event.get("items", [])}
            self.items = [item for item in self.items if item["key"] not in removed] if removed else []
        else:
            return  # a kind this client does not know
        self.major_revision = event.get("majorRevision", 0)
        self.expires_at_ms = event.get("expiresAtMs", 0)

    def _write(self, written: List[Dict[str, Any]]) -> None:
        for item in written:
            for index, old in enumerate(self.items):
                if old["key"] == item["key"]:
                    self.items[index] = item
                    break
            else:
                self.items.append(item)
