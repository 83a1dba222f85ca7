"""Resumed metadata subscriptions (SPEC SB-13.1-8) against a live gateway: since_revision gives the changes since,
MetadataSetCopy applies them, and a reconnecting client resumes from the last storage event it received."""
from __future__ import annotations

import asyncio
from typing import Any, Dict, List

from gateway import Gateway

from switchboard import Client, MetadataSetCopy, ReconnectPolicy, Stream
from switchboard.connection import Push

FAST = ReconnectPolicy(initial_delay=0.1, max_delay=0.5, jitter=0.1)


def run(coroutine: Any) -> Any:
    """Runs a test's coroutine; a hang fails it after 90 s instead of blocking the run."""
    return asyncio.run(asyncio.wait_for(coroutine, 90))


def key(index: int) -> str:
    return f"k{index:04d}"


def by_key(items: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return sorted(items, key=lambda item: item["key"])


async def next_snapshot(pushes: Stream[Push]) -> Dict[str, Any]:
    while True:
        push = await pushes.next(10)
        if push.body["eventType"] == "snapshot":
            return push.body


def test_a_resume_after_10_changes_to_a_1000_item_set_sends_the_changes_only(open_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(open_gateway.tcp, "py-ana") as ana, Client(open_gateway.unix, "py-tony") as tony:
            for start in range(0, 1000, 100):
                await ana.set_user_metadata(items=[{"key": key(i), "value": "v"} for i in range(start, start + 100)])
            pushes = tony.pushes("storageEvent")
            await tony.subscribe_user_metadata(user_id="py-ana")
            whole = await next_snapshot(pushes)
            assert len(whole["items"]) == 1000 and whole["resumedFrom"] == 0
            copy = MetadataSetCopy()
            copy.apply(whole)
            await tony.unsubscribe_user_metadata(user_id="py-ana")
            for i in range(1, 9):
                await ana.set_user_metadata(items=[{"key": key(i * 100), "value": "w"}])
            await ana.remove_user_metadata(items=[{"key": key(1)}])
            await ana.remove_user_metadata(items=[{"key": key(2)}])

            await tony.subscribe_user_metadata(user_id="py-ana", since_revision=copy.major_revision)
            delta = await next_snapshot(pushes)
            assert delta["resumedFrom"] == copy.major_revision and not delta["resumeFailed"]
            assert len(delta["items"]) == 8 and delta["removedKeys"] == [key(1), key(2)]
            copy.apply(delta)
            read = await tony.get_user_metadata(user_id="py-ana")
            assert copy.major_revision == read["majorRevision"]
            assert by_key(copy.items) == by_key(read["items"])

            await tony.subscribe_user_metadata(user_id="py-ana", since_revision=read["majorRevision"] + 3)
            future = await next_snapshot(pushes)
            assert future["resumeFailed"] and len(future["items"]) == 998
    run(main())


def test_after_a_gateway_restart_the_client_resumes_from_the_last_revision_it_received(fresh_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(fresh_gateway.unix, "ana", reconnect=FAST) as ana, \
                Client(fresh_gateway.tcp, "tony", reconnect=FAST) as tony:
            written = await tony.set_channel_metadata("lobby", items=[{"key": "topic", "value": "t"}])
            events, pushes = ana.connection_events(), ana.pushes("storageEvent")
            await ana.subscribe_user_metadata()
            await ana.subscribe_channel("lobby", with_metadata=True, with_presence=False)
            await ana.set_user_metadata(items=[{"key": "mood", "value": "ok"}])
            assert (await next_snapshot(pushes))["majorRevision"] == 0     # ana's own set did not exist yet
            assert (await next_snapshot(pushes))["majorRevision"] == written["majorRevision"]
            assert (await pushes.next(10)).body["eventType"] == "set"
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, fresh_gateway.restart)
            while True:
                event = await events.next(20)
                if event.kind == "restored":
                    break
            assert sorted((op, body.get("sinceRevision")) for op, body in event.restored) == [
                ("subscribeChannel", written["majorRevision"]), ("subscribeUserMetadata", 1)]
            resumed = [await next_snapshot(pushes), await next_snapshot(pushes)]
            assert all(s["resumedFrom"] > 0 and not s["resumeFailed"] and s["items"] == [] for s in resumed)
    run(main())
