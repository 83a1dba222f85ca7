"""Last wills (setWill / getWill, SPEC 13.10) through the Python client against a live gateway: a connection lost
without logout runs the will as its user; the client registers the will again on its new session by itself."""
from __future__ import annotations

import asyncio
from typing import Any, List, Optional

from gateway import Gateway

from switchboard import Client, ConnectionEvent, ReconnectPolicy

FAST = ReconnectPolicy(initial_delay=0.3, max_delay=0.5, jitter=0.0)
STATUS = {"operation": 12, "items": [{"key": "status", "value": "offline"}], "recordUserId": True}


def brief(actions: Any) -> List[Any]:
    """The parts of a will's actions the test set (answers carry every field, defaults included)."""
    return [(a["operation"], [(i["key"], i["value"]) for i in a["items"]], a["recordUserId"]) for a in actions]


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 90))


async def status_of(reader: Client, user_id: str) -> Optional[dict]:
    answer = await reader.get_user_metadata(user_id=user_id)
    return next((item for item in answer.get("items", []) if item["key"] == "status"), None)


def test_a_lost_connection_runs_the_will_and_the_client_registers_it_again(open_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(open_gateway.unix, "py-will-ann") as ann:
            async with Client(open_gateway.tcp, "py-will-tony", reconnect=FAST) as tony:
                events = tony.connection_events()
                assert (await tony.set_will(actions=[STATUS]))["actions"] == 1
                assert brief((await tony.get_will())["actions"]) == brief([STATUS])

                connection = tony.connection
                assert connection is not None
                connection._writer.transport.abort()          # no logout: an abnormal end
                status = None
                for _ in range(100):
                    status = await status_of(ann, "py-will-tony")
                    if status is not None and status["value"] == "offline":
                        break
                    await asyncio.sleep(0.05)
                assert status is not None and status["value"] == "offline"
                assert status["authorUserId"] == "py-will-tony"

                seen: List[ConnectionEvent] = []
                while not seen or seen[-1].kind != "restored":
                    seen.append(await events.next(20))
                assert [op for op, _ in seen[-1].restored] == ["setWill"]
                assert brief((await tony.get_will())["actions"]) == brief([STATUS])
                await tony.set_will(actions=[])
                assert (await tony.get_will()).get("actions", []) == []
    run(main())
