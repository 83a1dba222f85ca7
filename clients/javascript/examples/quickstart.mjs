import { Client } from "../src/index.js";
const endpoint = process.argv[2] ?? "127.0.0.1:7400";   // or "unix:PATH", or "ws://host:port/path" in a browser
const tony = new Client(endpoint, { userId: "tony" }), ana = new Client(endpoint, { userId: "ana" });
await tony.connect(); await ana.connect();
const changes = ana.pushes("storageEvent");                  // every storage event from now on
await ana.subscribeChannel({ channel: "lobby", withMetadata: true });
await tony.setChannelMetadata({ channel: "lobby", items: [{ key: "topic", value: "news" }] });
for await (const push of changes)                            // the snapshot first, then tony's change
  if (push.body.eventType === "set") { console.log(push.body.publisher, "set", push.body.items[0].value); break; }
await tony.logout(); await ana.logout();
