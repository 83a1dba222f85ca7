import asyncio, sys
from switchboard import Client

async def main(endpoint: str) -> None:
    async with Client(endpoint, "tony") as tony, Client(endpoint, "ana") as ana:
        changes = ana.pushes("storageEvent")            # every storage event from now on
        await ana.subscribe_channel("lobby", with_metadata=True)
        await tony.set_channel_metadata("lobby", items=[{"key": "topic", "value": "news"}])
        async for push in changes:                      # the snapshot first, then tony's change
            if push.body["eventType"] == "set":
                print(push.body["publisher"], "set", push.body["items"][0]["value"]); break

asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7400"))
