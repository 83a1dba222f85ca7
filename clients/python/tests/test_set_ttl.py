"""Set TTLs (SPEC SB-13.1-10) through the Python client against a live gateway: setTtlMs on a write, the set's
expiresAtMs in the response and the set event, one `expired` event with no items and majorRevision 0, the set gone
from get, a MetadataSetCopy emptied by it, 7017 for a bad setTtlMs."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from gateway import Gateway

from switchboard import Client, MetadataSetCopy, ServerError


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_a_set_with_a_ttl_expires_as_a_whole_with_one_expired_event(open_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(open_gateway.unix, "py-set-ttl") as writer, \
                Client(open_gateway.tcp, "py-set-ttl-w") as watcher:
            pushes = watcher.pushes("storageEvent")
            await watcher.subscribe_user_metadata(user_id="py-set-ttl")
            copy = MetadataSetCopy()
            copy.apply((await pushes.next(5)).body)
            start = int(time.time() * 1000)
            written = await writer.set_user_metadata(items=[{"key": "status", "value": "away"}], set_ttl_ms=300)
            assert start + 300 <= written["expiresAtMs"] < start + 10_300
            event = (await pushes.next(5)).body
            assert event["eventType"] == "set" and event["expiresAtMs"] == written["expiresAtMs"]
            copy.apply(event)
            assert copy.expires_at_ms == written["expiresAtMs"]
            expired = (await pushes.next(5)).body
            assert expired["eventType"] == "expired"
            assert expired.get("items", []) == [] and expired.get("majorRevision", 0) == 0
            assert int(time.time() * 1000) >= written["expiresAtMs"]
            copy.apply(expired)
            assert copy.items == [] and copy.major_revision == 0 and copy.expires_at_ms == 0
            got = await writer.get_user_metadata()
            assert got.get("items", []) == [] and got.get("majorRevision", 0) == 0
            with pytest.raises(ServerError) as refused:
                await writer.set_user_metadata(items=[{"key": "k", "value": "v"}], set_ttl_ms=-2)
            assert refused.value.code == 7017
    run(main())
