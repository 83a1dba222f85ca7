"""The admin change stream (subscribeChanges, SPEC 13.8) through the Python client against a live gateway: changes
of matching users only, in position order, and the stream resumed after a lost connection with exactly the
changes missed."""
from __future__ import annotations

import asyncio
from typing import Any, List

from gateway import Gateway

from switchboard import Client, ConnectionEvent, ReconnectPolicy

FAST = ReconnectPolicy(initial_delay=0.3, max_delay=0.5, jitter=0.0)


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 90))


def test_change_stream_carries_matching_changes_and_resumes_after_a_lost_connection(open_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(open_gateway.unix, "py-ops", reconnect=FAST) as ops:
            pushes, events = ops.pushes("change"), ops.connection_events()
            answer = await ops.subscribe_changes(user_pattern="pyc-*", kinds=["online", "userMetadata"])
            assert answer["epoch"] > 0 and not answer["gap"]
            async with Client(open_gateway.unix, "pyc-1") as user, Client(open_gateway.unix, "other-1") as other:
                await other.set_user_metadata(items=[{"key": "k", "value": "not mine"}])
                await user.set_user_metadata(items=[{"key": "k", "value": "one"}])
                online, first = (await pushes.next(5)).body, (await pushes.next(5)).body
                assert (online["kind"], online["userId"], online["onlineValue"]) == ("online", "pyc-1", 1)
                assert first["kind"] == "userMetadata" and first["items"][0]["value"] == "one"
                assert first["position"] > online["position"] > answer["position"]

                connection = ops.connection
                assert connection is not None
                connection._writer.transport.abort()          # the admin's connection is lost
                await user.set_user_metadata(items=[{"key": "k", "value": "two"}])   # missed meanwhile
                seen: List[ConnectionEvent] = []
                while not seen or seen[-1].kind != "restored":
                    seen.append(await events.next(20))
                restored = seen[-1]
                assert [op for op, _ in restored.restored] == ["subscribeChanges"]
                assert restored.change_stream is not None
                assert restored.change_stream["epoch"] == answer["epoch"] and not restored.change_stream["gap"]
                assert restored.change_stream["replayed"] == 1
                missed = (await pushes.next(5)).body
                assert missed["items"][0]["value"] == "two" and missed["position"] > first["position"]
                await user.set_user_metadata(items=[{"key": "k", "value": "three"}])
                live = (await pushes.next(5)).body
                assert live["items"][0]["value"] == "three" and live["position"] > missed["position"]
                await asyncio.sleep(0.2)
                assert len(pushes._items) == 0, "a change arrived twice, or one not matching arrived"
    run(main())
