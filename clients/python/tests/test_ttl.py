"""Item TTLs (SPEC SB-13.1-9) through the Python client against a live gateway: ttlMs on a written item, its
expiresAtMs in the set event, the `expired` event from the server, the item gone from get, 7017 for a bad TTL."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from gateway import Gateway

from switchboard import Client, ServerError


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_an_item_with_a_ttl_expires_with_an_expired_event_and_leaves_get(open_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(open_gateway.unix, "py-ttl") as writer, Client(open_gateway.tcp, "py-ttl-w") as watcher:
            pushes = watcher.pushes("storageEvent")
            await watcher.subscribe_user_metadata(user_id="py-ttl")
            assert (await pushes.next(5)).body["eventType"] == "snapshot"
            before = int(time.time() * 1000)
            await writer.set_user_metadata(items=[{"key": "typing", "value": "yes", "ttlMs": 300},
                                                  {"key": "name", "value": "Py"}])
            written = (await pushes.next(5)).body
            assert written["eventType"] == "set"
            deadline = next(i for i in written["items"] if i["key"] == "typing")["expiresAtMs"]
            assert before + 300 <= deadline < before + 10_300
            expired = (await pushes.next(5)).body
            assert expired["eventType"] == "expired"
            assert [i["key"] for i in expired["items"]] == ["typing"]
            assert expired["majorRevision"] == 2 and not expired.get("publisher")
            assert int(time.time() * 1000) >= deadline
            got = await writer.get_user_metadata()
            assert [i["key"] for i in got["items"]] == ["name"]
            with pytest.raises(ServerError) as refused:
                await writer.set_user_metadata(items=[{"key": "k", "value": "v", "ttlMs": 50}])
            assert refused.value.code == 7017
    run(main())
