"""Runs the live conformance scenarios of Protocol/conformance/scenarios.json (format: its README.md) with the
Python client against a gateway of their own."""
from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Dict, List, Optional

from gateway import SECRET, Gateway

from switchboard import Client, ConnectionEvent, Push, ReconnectPolicy, Stream, SwitchboardError

SCENARIOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "Protocol", "conformance",
                         "scenarios.json")


def load() -> Dict[str, Any]:
    with open(SCENARIOS, encoding="utf-8") as f:
        document: Dict[str, Any] = json.load(f)
    return document


class Mismatch(AssertionError):
    pass


def matches(expected: Any, actual: Any, where: str = "$") -> None:
    """Raises Mismatch unless `actual` matches `expected`: objects by the keys `expected` names (others ignored),
    arrays element by element with the same length, "$any" anything present, other values by equality."""
    if expected == "$any":
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            raise Mismatch("%s: expected an object, got %r" % (where, actual))
        for key, value in expected.items():
            if key not in actual:
                raise Mismatch("%s: no %r in %r" % (where, key, actual))
            matches(value, actual[key], "%s.%s" % (where, key))
        return
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            raise Mismatch("%s: expected %d elements, got %r" % (where, len(expected), actual))
        for i, (e, a) in enumerate(zip(expected, actual)):
            matches(e, a, "%s[%d]" % (where, i))
        return
    if expected != actual or isinstance(expected, bool) != isinstance(actual, bool):
        raise Mismatch("%s: expected %r, got %r" % (where, expected, actual))


class Runner:
    """One scenario: its gateway, its clients (each with a push stream and a connection-event stream from the moment
    it connects) and the values steps saved."""

    def __init__(self, document: Dict[str, Any], scenario: Dict[str, Any]) -> None:
        self.defaults = document.get("defaults", {})
        self.scenario = scenario
        auth = scenario.get("gateway", {}).get("auth", "open")
        self.gateway = Gateway(secret=SECRET if auth == "token" else None)
        self.clients: Dict[str, Client] = {}
        self.pushes: Dict[str, Stream[Push]] = {}
        self.events: Dict[str, Stream[ConnectionEvent]] = {}
        self.saved: Dict[str, Any] = {}
        self.timeout = self.defaults.get("timeoutMs", 5000) / 1000.0

    def value(self, v: Any) -> Any:
        """A step's value with "$name" replaced by a saved value and {"$repeat": s, "times": n} by s * n."""
        if isinstance(v, str) and v.startswith("$") and v[1:] in self.saved:
            return self.saved[v[1:]]
        if isinstance(v, dict):
            if "$repeat" in v:
                return str(v["$repeat"]) * int(v["times"])
            return {k: self.value(x) for k, x in v.items()}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        return v

    async def run(self) -> None:
        self.gateway.start()
        try:
            for index, step in enumerate(self.scenario["steps"]):
                try:
                    await self.step(step)
                except (Mismatch, SwitchboardError, asyncio.TimeoutError) as e:
                    raise AssertionError("step %d %s: %s: %s\ngateway log:\n%s" % (
                        index + 1, json.dumps(step)[:300], type(e).__name__, e, self.gateway.log()[-1500:])) from e
        finally:
            for client in self.clients.values():
                await client.close()
            self.gateway.remove()

    async def step(self, step: Dict[str, Any]) -> None:
        do = step["do"]
        if do == "restartGateway":
            await asyncio.get_running_loop().run_in_executor(None, self.gateway.restart)
            return
        if do == "sleep":
            await asyncio.sleep(step["ms"] / 1000.0)
            return
        name = step["client"]
        if do == "connect":
            await self.connect(name, step)
        elif do == "request":
            await self.request(name, step)
        elif do == "push":
            await self.push(name, step)
        elif do == "awaitRestored":
            await self.restored(name, step)
        elif do == "logout":
            await self.logout(name, step)
        elif do == "close":
            await self.clients.pop(name).close()
        else:
            raise AssertionError("unknown step %r" % do)

    async def connect(self, name: str, step: Dict[str, Any]) -> None:
        spec = self.scenario["clients"][name]
        token = ""
        if "token" in spec:
            t = spec["token"]
            token = t if isinstance(t, str) else self.gateway.token(t["user"], admin=t.get("admin", False))
        client = Client(self.gateway.endpoint(spec.get("transport", "tcp")), spec.get("user", ""), token,
                        device_id=spec.get("device", ""), compression=spec.get("compression", True),
                        reconnect=ReconnectPolicy(initial_delay=0.1, max_delay=0.5, jitter=0.1),
                        request_timeout=self.timeout)
        pushes, events = client.pushes(), client.connection_events()
        try:
            welcome = await client.connect()
        except SwitchboardError as e:
            if "expectError" not in step:
                raise
            matches(step["expectError"], {"code": e.code, "name": e.name})
            return
        if "expectError" in step:
            raise Mismatch("connected, expected %s" % step["expectError"])
        matches(self.value(step.get("expect", {})), dict(welcome))
        self.clients[name], self.pushes[name], self.events[name] = client, pushes, events

    async def request(self, name: str, step: Dict[str, Any]) -> None:
        try:
            response = await self.clients[name].call(step["op"], self.value(step.get("args", {})))
        except SwitchboardError as e:
            if "expectError" not in step:
                raise
            matches(self.value(step["expectError"]), dict(e.body, code=e.code, name=e.name))
            return
        if "expectError" in step:
            raise Mismatch("%s succeeded with %r, expected %s" % (step["op"], response, step["expectError"]))
        matches(self.value(step.get("expect", {})), response)
        for variable, field in step.get("save", {}).items():
            self.saved[variable] = response[field]

    async def push(self, name: str, step: Dict[str, Any]) -> None:
        """The first push of the kind that matches, within the time limit (other pushes are passed over)."""
        stream, kind = self.pushes[name], step["kind"]
        expected = self.value(step.get("expect", {}))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + step.get("withinMs", self.defaults.get("pushWithinMs", 5000)) / 1000.0
        seen: List[Dict[str, Any]] = []
        while True:
            remaining = deadline - loop.time()
            try:
                push = await stream.next(max(0.0, remaining))
            except asyncio.TimeoutError:
                raise Mismatch("no %s push matching %s arrived; %s pushes seen: %s" % (
                    kind, json.dumps(expected)[:300], kind, json.dumps(seen)[:1200])) from None
            if push.kind != kind:
                continue
            try:
                matches(expected, push.body)
            except Mismatch:
                seen.append(push.body)
                continue
            if "compressed" in step and push.compressed != step["compressed"]:
                raise Mismatch("the %s push arrived %scompressed" % (kind, "" if push.compressed else "un"))
            return

    async def restored(self, name: str, step: Dict[str, Any]) -> None:
        """The client reconnected: a `restored` event whose restored ops are `expect.restored` (in order)."""
        stream: Stream[ConnectionEvent] = self.events[name]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + step.get("withinMs", 20000) / 1000.0
        while True:
            event = await stream.next(max(0.0, deadline - loop.time()))
            if event.kind == "restored":
                matches(step.get("expect", {}), {"restored": [op for op, _ in event.restored],
                                                 "failed": [op for op, _, _ in event.failed]})
                return

    async def logout(self, name: str, step: Dict[str, Any]) -> None:
        client = self.clients.pop(name)
        connection = client.connection
        assert connection is not None
        await client.logout()
        goaway: Optional[Dict[str, Any]] = connection.goaway
        if "expectGoAway" in step:
            if goaway is None:
                raise Mismatch("no GOAWAY arrived after logout")
            matches(step["expectGoAway"], goaway)
