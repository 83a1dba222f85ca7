"""The replay of online-only events (resumeEvents, SPEC SB-13.4-9) through the Python client against a live
gateway: a client whose connection is lost gets the events published meanwhile by itself after the reconnect, once
and in order, and reports the answer in its `restored` event; a client with no position does not ask."""
from __future__ import annotations

import asyncio
from typing import Any, Dict, List

from gateway import Gateway

from switchboard import Client, ConnectionEvent, ReconnectPolicy, Stream

STEADY = ReconnectPolicy(initial_delay=0.5, max_delay=0.5, jitter=0.0)


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 90))


async def application_events(pushes: Stream[Any], count: int) -> List[Dict[str, Any]]:
    """The next `count` application events (value 10000 and up) of a subscribedEvents stream."""
    out: List[Dict[str, Any]] = []
    while len(out) < count:
        out += [e for e in (await pushes.next(5)).body["events"] if e["value"] >= 10000]
    return out


async def restored_event(events: Stream[ConnectionEvent]) -> ConnectionEvent:
    while True:
        event = await events.next(20)
        if event.kind == "restored":
            return event


def test_a_client_whose_connection_is_lost_gets_the_online_only_events_missed_meanwhile(open_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(open_gateway.unix, "pye-tony", reconnect=STEADY) as tony:
            pushes, events = tony.pushes("subscribedEvents"), tony.connection_events()
            subscribed = await tony.subscribe_event(3600, publishers=["pye-ana"])
            assert subscribed["epoch"] > 0
            assert tony.event_replay_position == (subscribed["epoch"], subscribed["position"])
            async with Client(open_gateway.unix, "pye-ana") as ana:
                await ana.publish_event(10001)
                [live] = await application_events(pushes, 1)
                assert live["value"] == 10001 and live["epoch"] == subscribed["epoch"]
                assert live["position"] > subscribed["position"]
                assert tony.event_replay_position == (live["epoch"], live["position"])

                connection = tony.connection
                assert connection is not None
                connection._writer.transport.abort()          # lost; the reconnect waits 0.5 s
                await asyncio.sleep(0.1)
                await ana.publish_event(10002)                 # missed meanwhile
                await ana.publish_event(10003)
                restored = await restored_event(events)
                assert restored.events is not None
                assert restored.events["epoch"] == subscribed["epoch"] and not restored.events["gap"]
                assert restored.events["replayed"] == 2
                missed = await application_events(pushes, 2)
                assert [e["value"] for e in missed] == [10002, 10003]
                assert live["position"] < missed[0]["position"] < missed[1]["position"]
                await ana.publish_event(10004)
                assert [e["value"] for e in await application_events(pushes, 1)] == [10004]
                await asyncio.sleep(0.2)
                left = [e for p in pushes._items for e in p.body["events"] if e["value"] >= 10000]
                assert left == [], "an event arrived twice"
    run(main())


def test_a_client_with_no_position_does_not_ask_and_another_epoch_answers_gap(open_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(open_gateway.unix, "pye-bo", reconnect=STEADY) as bo:
            events = bo.connection_events()
            assert bo.event_replay_position is None
            connection = bo.connection
            assert connection is not None
            connection._writer.transport.abort()
            restored = await restored_event(events)
            assert restored.events is None
            answer = await bo.resume_events(epoch=1, after=1)
            assert answer["gap"] and answer["replayed"] == 0
            assert bo.event_replay_position == (answer["epoch"], answer["position"])
    run(main())
