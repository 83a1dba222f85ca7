"""Channel broadcasts (broadcast, rewindBroadcasts, SPEC 13.11) through the Python client against a live gateway:
members get a channelBroadcast push and a non-member does not, the sender only with echo, a joiner rewinds the last
ones, and the size and rewind limits answer their errors."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
from gateway import Gateway

from switchboard import Client, SwitchboardError


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_members_get_a_broadcast_a_non_member_does_not_and_a_joiner_rewinds(open_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(open_gateway.unix, "py-sender") as sender, \
                Client(open_gateway.unix, "py-member") as member, \
                Client(open_gateway.unix, "py-outsider") as outsider:
            at_member, at_sender = member.pushes("channelBroadcast"), sender.pushes("channelBroadcast")
            at_outsider = outsider.pushes("channelBroadcast")
            await member.subscribe_channel(channel="py-doc", with_presence=False)
            await sender.subscribe_channel(channel="py-doc", with_presence=False)
            await outsider.subscribe_channel(channel="py-other", with_presence=False)

            sent = await sender.broadcast(channel="py-doc", data='{"cursor":[3,4]}')
            assert sent["delivered"] == 1
            got = (await at_member.next(5)).body
            assert (got["channel"], got["sender"], got["data"]) == ("py-doc", "py-sender", '{"cursor":[3,4]}')
            assert got["sequence"] == sent["sequence"]
            echoed = await sender.broadcast(channel="py-doc", data="wave", echo=True)
            assert (await at_sender.next(5)).body["data"] == "wave"
            assert (await at_member.next(5)).body["sequence"] == echoed["sequence"]
            await asyncio.sleep(0.2)
            assert len(at_outsider._items) == 0, "a non-member got a broadcast"

            async with Client(open_gateway.unix, "py-joiner") as joiner:
                await joiner.subscribe_channel(channel="py-doc")
                rewound = await joiner.rewind_broadcasts(channel="py-doc", limit=1)
                assert [b["data"] for b in rewound["broadcasts"]] == ["wave"]
                assert rewound["latestSequence"] == echoed["sequence"]
                with pytest.raises(SwitchboardError) as too_many:
                    await joiner.rewind_broadcasts(channel="py-doc", limit=101)
                assert too_many.value.code == 7016
            with pytest.raises(SwitchboardError) as too_large:
                await sender.broadcast(channel="py-doc", data="x" * 4097)
            assert too_large.value.code == 7015
            with pytest.raises(SwitchboardError) as not_member:
                await outsider.rewind_broadcasts(channel="py-doc")
            assert not_member.value.code == 4004
    run(main())
