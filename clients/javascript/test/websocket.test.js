// The WebSocket transport (binary messages carrying whole frames, subprotocol switchboard.v1), with the `ws`
// package's WebSocket constructor as Node 20 has none, through a WebSocket-to-TCP relay in front of a live gateway.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, ConnectFailed, ErrorCode, ReconnectPolicy, ServerError, SUBPROTOCOL } from "../src/index.js";
import { Gateway } from "../testlib/gateway.js";
import { Relay, loadWs } from "../testlib/relay.js";

const WebSocket = loadWs();
let gateway, relay;
before(async () => {
  gateway = await new Gateway().start();
  relay = await new Relay(gateway.port).start();
});
after(async () => {
  await relay.stop();
  await gateway.remove();
});

async function nextEvent(stream, kind, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const event = await stream.next(Math.max(0, deadline - Date.now()));
    if (event.kind === kind) return event;
  }
}

test("over WebSocket: login, a channel, another client's change arrives (compressed), an error code", async () => {
  const web = new Client(relay.url, { userId: "ana", WebSocket });
  const tcp = new Client(gateway.tcp, { userId: "tony" });
  try {
    const welcome = await web.connect();
    await tcp.connect();
    assert.equal(welcome.userId, "ana");
    assert.deepEqual(welcome.features, ["zlib"]);
    assert.equal(web.connection.transport.kind, "websocket");
    assert.equal(relay.protocols.at(-1), SUBPROTOCOL);
    const pushes = web.pushes("storageEvent", "presenceEvent");
    await web.subscribeChannel({ channel: "room", withMetadata: true });
    const doc = "switchboard ".repeat(1000);
    await tcp.subscribeChannel({ channel: "room" });
    await tcp.setChannelMetadata({ channel: "room", items: [{ key: "doc", value: doc }] });
    const seen = [];
    for (;;) {
      const push = await pushes.next(5000);
      seen.push(`${push.kind}:${push.body.eventType}`);
      if (push.kind === "storageEvent" && push.body.eventType === "set") {
        assert.equal(push.compressed, true);
        assert.equal(push.body.items[0].value, doc);
        break;
      }
    }
    assert.ok(seen.includes("presenceEvent:remoteJoin"), seen.join(","));
    await web.setChannelMetadata({ channel: "room", items: [{ key: "big", value: "x".repeat(4000) }] });
    assert.equal(web.stats.compressedFramesSent, 1);
    const error = await web.acquireLock({ channel: "room", lockName: "none" }).then(() => null, (e) => e);
    assert.ok(error instanceof ServerError, String(error));
    assert.equal(error.code, ErrorCode.lockNotFound);
    assert.deepEqual(relay.badMessages, []);
    assert.ok(relay.messagesFromClients >= 4, String(relay.messagesFromClients));   // hello, 3 requests
  } finally {
    await web.logout();
    await tcp.logout();
  }
});

test("over WebSocket: a dropped connection is reconnected and its subscriptions restored", async () => {
  const web = new Client(relay.url, {
    userId: "bob", WebSocket, reconnect: new ReconnectPolicy({ initialDelay: 100, maxDelay: 500, jitter: 0.1 }),
  });
  const tcp = new Client(gateway.tcp, { userId: "eve" });
  try {
    const events = web.connectionEvents();
    const pushes = web.pushes("storageEvent");
    await web.connect();
    await tcp.connect();
    await web.subscribeUserMetadata({ userId: "eve" });
    relay.dropAll();
    const lost = await nextEvent(events, "disconnected");
    assert.equal(lost.willReconnect, true);
    const restored = await nextEvent(events, "restored");
    assert.deepEqual(restored.restored.map(([op]) => op), ["subscribeUserMetadata"]);
    await tcp.setUserMetadata({ items: [{ key: "mood", value: "fine" }] });
    for (;;) {
      const push = await pushes.next(5000);
      if (push.body.eventType === "set") {
        assert.equal(push.body.target, "eve");
        break;
      }
    }
  } finally {
    await web.logout();
    await tcp.logout();
  }
});

test("without a WebSocket constructor (Node 20 has no global one) connecting fails with a clear ConnectFailed", async () => {
  const client = new Client(relay.url, { userId: "x", WebSocket: null });
  const error = await client.connect().then(() => null, (e) => e);
  assert.ok(error instanceof ConnectFailed, String(error));
  assert.equal(error.code, 8004);
  assert.match(error.message, /WebSocket option/);
});
