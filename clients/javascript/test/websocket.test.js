// The WebSocket transport (binary messages carrying whole frames, subprotocol switchboard.v1) against the gateway's
// own WebSocket listener (--websocket), with the `ws` package's WebSocket constructor as Node 20 has none. The
// gateway ends a connection whose message splits a frame (GOAWAY 1011), so every answer here also shows that the
// client sent whole frames.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, ConnectFailed, ErrorCode, ReconnectPolicy, ServerError, SUBPROTOCOL } from "../src/index.js";
import { Gateway } from "../testlib/gateway.js";
import { loadWs } from "../testlib/ws.js";

const WebSocket = loadWs();
let gateway;
before(async () => {
  gateway = await new Gateway({ websocket: true }).start();
});
after(async () => {
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
  const web = new Client(gateway.websocketUrl, { userId: "ana", WebSocket });
  const tcp = new Client(gateway.tcp, { userId: "tony" });
  try {
    const welcome = await web.connect();
    await tcp.connect();
    assert.equal(welcome.userId, "ana");
    assert.deepEqual(welcome.features, ["zlib"]);
    assert.equal(web.connection.transport.kind, "websocket");
    assert.equal(web.connection.transport.protocol, SUBPROTOCOL);
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
  } finally {
    await web.logout();
    await tcp.logout();
  }
});

test("over WebSocket: a connection lost to a gateway restart is reconnected and its subscriptions restored", async () => {
  const web = new Client(gateway.websocketUrl, {
    userId: "bob", WebSocket, reconnect: new ReconnectPolicy({ initialDelay: 100, maxDelay: 500, jitter: 0.1 }),
  });
  let tcp = null;
  try {
    const events = web.connectionEvents();
    const pushes = web.pushes("storageEvent");
    await web.connect();
    await web.subscribeUserMetadata({ userId: "eve" });
    const restart = gateway.restart();
    const lost = await nextEvent(events, "disconnected");
    assert.equal(lost.willReconnect, true);
    await restart;
    const restored = await nextEvent(events, "restored", 30000);
    assert.deepEqual(restored.restored.map(([op]) => op), ["subscribeUserMetadata"]);
    tcp = new Client(gateway.tcp, { userId: "eve" });
    await tcp.connect();
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
    await tcp?.logout();
  }
});

test("without a WebSocket constructor (Node 20 has no global one) connecting fails with a clear ConnectFailed", async () => {
  const client = new Client(gateway.websocketUrl, { userId: "x", WebSocket: null });
  const error = await client.connect().then(() => null, (e) => e);
  assert.ok(error instanceof ConnectFailed, String(error));
  assert.equal(error.code, 8004);
  assert.match(error.message, /WebSocket option/);
});
