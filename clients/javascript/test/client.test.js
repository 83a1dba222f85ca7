// The JavaScript client against a live gateway over node:net (TCP and the Unix socket): every op a method, typed
// errors with the wire code, request timeouts, the in-flight limit, heartbeats, GOAWAY, reconnect with
// subscriptions restored, token providers, logout.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import {
  Client, ClientClosed, ErrorCode, GoAwayError, ReconnectPolicy, RequestTimeout, ServerError, SwitchboardError,
} from "../src/index.js";
import { SCHEMA } from "../src/generated.js";
import { Gateway, SECRET } from "../testlib/gateway.js";

const FAST = new ReconnectPolicy({ initialDelay: 100, maxDelay: 500, jitter: 0.1 });
const pause = (ms) => new Promise((r) => setTimeout(r, ms));

async function nextEvent(stream, kind, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const event = await stream.next(Math.max(0, deadline - Date.now()));
    if (event.kind === kind) return event;
  }
}

let open;
before(async () => { open = await new Gateway().start(); });
after(async () => { await open.remove(); });

test("every operation of the schema is a method of Client that sends that op", async () => {
  for (const op of SCHEMA.operations) assert.equal(typeof Client.prototype[op.name], "function", op.name);
  const client = new Client(open.unix, { userId: "ops" });
  await client.connect();
  assert.deepEqual(await client.setUserMetadata({ items: [{ key: "k", value: "v" }] }), { majorRevision: 1, expiresAtMs: 0 });
  const got = await client.getUserMetadata();
  assert.equal(got.userId, "ops");
  assert.deepEqual(got.items.map((i) => [i.key, i.value, i.revision]), [["k", "v", 1]]);
  await client.logout();
});

test("an error response rejects with a ServerError carrying the wire code and the ErrorBody", async () => {
  const client = new Client(open.tcp, { userId: "cas" });
  await client.connect();
  await client.setChannelMetadata({ channel: "cas", items: [{ key: "a", value: "1" }] });
  const error = await client.setChannelMetadata({ channel: "cas", majorRevision: 9, items: [{ key: "a", value: "2" }] })
    .then(() => null, (e) => e);
  assert.ok(error instanceof ServerError && error instanceof SwitchboardError);
  assert.equal(error.kind, "server");
  assert.equal(error.code, ErrorCode.revisionConflict);
  assert.equal(error.codeName, "revisionConflict");
  assert.equal(error.errorClass, "casConflict");
  assert.equal(error.body.currentRevision, 1);
  assert.deepEqual(await client.getChannelMetadata({ channel: "cas" }).then((r) => r.majorRevision), 1);
  await client.logout();
});

test("a request without an answer in time rejects with RequestTimeout (8003); its late answer is dropped", async () => {
  const client = new Client(open.tcp, { userId: "slow", reconnect: ReconnectPolicy.never() });
  await client.connect();
  await open.pause();
  let error;
  try {
    error = await client.getUserMetadata({}, { timeout: 300 }).then(() => null, (e) => e);
  } finally {
    open.resume();
  }
  assert.ok(error instanceof RequestTimeout, String(error));
  assert.equal(error.code, 8003);
  assert.equal(error.kind, "timedOut");
  const next = await client.getUserMetadata({}, { timeout: 5000 });
  assert.equal(next.userId, "slow");
  assert.equal(client.connection.pending.size, 0);
  await client.logout();
});

test("requests beyond WELCOME.maxInflight wait for a free slot and are not sent meanwhile", async () => {
  const gateway = await new Gateway({ extra: ["--max-inflight", "2"] }).start();
  try {
    const client = new Client(gateway.tcp, { userId: "busy", reconnect: ReconnectPolicy.never() });
    const welcome = await client.connect();
    assert.equal(welcome.maxInflight, 2);
    const before = client.connection.stats.framesSent;
    await gateway.pause();
    let results;
    try {
      results = await Promise.all([1, 2, 3].map(() => client.getUserMetadata({}, { timeout: 400 }).then(() => null, (e) => e)));
    } finally {
      gateway.resume();
    }
    assert.equal(client.connection.stats.framesSent - before, 2);
    assert.ok(results.every((e) => e instanceof RequestTimeout));
    assert.match(results[2].message, /no free request slot/);
    await pause(300);                                      // the late answers free the slots
    assert.equal((await client.getUserMetadata({}, { timeout: 5000 })).userId, "busy");
    await client.logout();
  } finally {
    await gateway.remove();
  }
});

test("heartbeats: an idle connection is pinged, a silent one ends with 1009 and the client reconnects", async () => {
  const gateway = await new Gateway({ extra: ["--heartbeat-ms", "1000", "--heartbeat-misses", "2"] }).start();
  try {
    const client = new Client(gateway.tcp, { userId: "beat", heartbeatMs: 1000, reconnect: FAST });
    const events = client.connectionEvents();
    const welcome = await client.connect();
    assert.equal(welcome.heartbeatMs, 1000);
    await pause(1600);
    assert.ok(client.stats.pingsSent >= 1, `pings sent: ${client.stats.pingsSent}`);
    await gateway.pause();
    let lost;
    try {
      lost = await nextEvent(events, "disconnected", 8000);
    } finally {
      gateway.resume();
    }
    assert.equal(lost.error.code, ErrorCode.heartbeatTimeout);
    assert.equal(lost.willReconnect, true);
    await nextEvent(events, "connected", 15000);
    assert.equal((await client.getUserMetadata()).userId, "beat");
    await client.close();
  } finally {
    await gateway.remove();
  }
});

test("a gateway restart: GOAWAY 8002, reconnect with backoff, subscriptions restored, pushes flow again", async () => {
  const gateway = await new Gateway().start();
  try {
    const watcher = new Client(gateway.unix, { userId: "ana", reconnect: FAST });
    const writer = new Client(gateway.tcp, { userId: "tony", reconnect: FAST });
    const events = watcher.connectionEvents();
    const pushes = watcher.pushes("storageEvent");
    await watcher.connect();
    await writer.connect();
    await watcher.subscribeChannel({ channel: "lobby", withMetadata: true, withPresence: false });
    assert.equal((await pushes.next(5000)).body.eventType, "snapshot");
    // In flight across the GOAWAY: answered, or failed with the GOAWAY when the server never read it (SB-5.8).
    const pending = writer.getUserMetadata({}, { timeout: 20000 }).then((r) => r.userId, (e) => e);
    await gateway.restart();
    const lost = await nextEvent(events, "disconnected");
    assert.ok(lost.error instanceof GoAwayError, String(lost.error));
    assert.equal(lost.error.code, ErrorCode.shuttingDown);
    const reconnecting = await nextEvent(events, "reconnecting");
    assert.ok(reconnecting.delay >= 90 && reconnecting.delay <= 110, String(reconnecting.delay));
    const restored = await nextEvent(events, "restored", 20000);
    assert.deepEqual(restored.restored.map(([op]) => op), ["subscribeChannel"]);
    const outcome = await pending;
    assert.ok(outcome === "tony" || (outcome instanceof GoAwayError && outcome.code === ErrorCode.shuttingDown), String(outcome));
    await writer.setChannelMetadata({ channel: "lobby", items: [{ key: "topic", value: "back" }] }, { timeout: 20000 });
    for (;;) {
      const push = await pushes.next(5000);
      if (push.body.eventType === "set") {
        assert.deepEqual(push.body.items.map((i) => i.value), ["back"]);
        break;
      }
    }
    await watcher.logout();
    await writer.logout();
  } finally {
    await gateway.remove();
  }
});

test("tokens: a provider is asked for every session; a refused token ends the client without retrying", async () => {
  const gateway = await new Gateway({ secret: SECRET }).start();
  try {
    let asked = 0;
    const client = new Client(gateway.tcp, {
      tokenProvider: async () => { asked += 1; return gateway.token("ana"); }, reconnect: FAST,
    });
    let attempts = 0;
    client.on("connection", (event) => { if (event.kind === "reconnecting") attempts += 1; });
    const events = client.connectionEvents();
    try {
      const welcome = await client.connect();
      assert.equal(welcome.userId, "ana");
      assert.equal(welcome.isAdmin, false);
      await gateway.restart();
      await nextEvent(events, "restored", 20000);
      assert.ok(attempts >= 1);
      assert.equal(asked, 1 + attempts);                   // once for the first session, once per attempt
      assert.equal((await client.getUserMetadata()).userId, "ana");
    } finally {
      await client.logout();
    }

    const stale = new Client(gateway.unix, { token: gateway.token("bob"), reconnect: FAST });
    let staleAttempts = 0;
    stale.on("connection", (event) => { if (event.kind === "reconnecting") staleAttempts += 1; });
    await stale.connect();
    gateway.secret = `${SECRET}-rotated`;                   // bob's token no longer verifies
    await gateway.restart();
    const ended = await Promise.race([stale.closed(), pause(10000).then(() => "still reconnecting")]);
    assert.ok(ended instanceof GoAwayError, String(ended));
    assert.equal(ended.code, ErrorCode.invalidToken);
    assert.equal(stale.state, "closed");
    const attemptsAtEnd = staleAttempts;
    assert.ok(attemptsAtEnd >= 1);
    await pause(700);                                      // longer than the backoff: no attempt after the refusal
    assert.equal(staleAttempts, attemptsAtEnd);

    const forged = new Client(gateway.tcp, { token: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJtIn0.bm9wZQ", reconnect: FAST });
    const refusal = await forged.connect().then(() => null, (e) => e);
    assert.ok(refusal instanceof GoAwayError, String(refusal));
    assert.equal(refusal.code, ErrorCode.invalidToken);
    assert.equal(refusal.errorClass, "auth");
    assert.equal(forged.state, "idle");
  } finally {
    await gateway.remove();
  }
});

test("a token that expires soon is renewed from the token provider (serverNotice 2002, renewToken)", async () => {
  const gateway = await new Gateway({ secret: SECRET }).start();
  const ttls = ["20s", "1h"];                              // the first expires within the server's 60 s notice lead
  const client = new Client(gateway.tcp, {
    tokenProvider: async () => gateway.token("tina", { ttl: ttls.length > 1 ? ttls.shift() : ttls[0] }),
    reconnect: ReconnectPolicy.never(),
  });
  try {
    const events = client.connectionEvents(), notices = client.pushes("serverNotice");
    await client.connect();
    const notice = await notices.next(5000);
    assert.equal(notice.body.code, ErrorCode.tokenExpired);
    assert.ok(notice.body.atMs > 0);
    const renewed = await nextEvent(events, "tokenRenewed", 5000);
    assert.equal(renewed.kind, "tokenRenewed");
    assert.equal((await client.getUserMetadata()).userId, "tina");
  } finally {
    await client.logout();
    await gateway.remove();
  }
});

test("logout: the server's GOAWAY (code 0, reason logout) ends the client; later calls reject with ClientClosed", async () => {
  const client = new Client(open.tcp, { userId: "bye" });
  await client.connect();
  const connection = client.connection;
  await client.logout();
  assert.equal(connection.goaway.code, 0);
  assert.equal(connection.goaway.reason, "logout");
  assert.ok(connection.isClosed);
  assert.equal(client.state, "closed");
  await assert.rejects(client.getUserMetadata(), ClientClosed);
});

test("a compressed push arrives inflated and flagged; a large request is sent compressed", async () => {
  const reader = new Client(open.unix, { userId: "zr" });
  const writer = new Client(open.tcp, { userId: "zw" });
  await reader.connect();
  await writer.connect();
  const pushes = reader.pushes("storageEvent");
  await reader.subscribeChannel({ channel: "zip", withMetadata: true, withPresence: false });
  await pushes.next(5000);
  const doc = "switchboard ".repeat(1000);
  await writer.setChannelMetadata({ channel: "zip", items: [{ key: "doc", value: doc }] });
  assert.equal(writer.stats.compressedFramesSent, 1);
  const push = await pushes.next(5000);
  assert.equal(push.compressed, true);
  assert.equal(push.body.items[0].value, doc);
  assert.ok(reader.stats.compressedFramesReceived >= 1);
  await reader.logout();
  await writer.logout();
});

test("listeners see pushes and connection events as they come", async () => {
  const client = new Client(open.tcp, { userId: "listen" });
  const kinds = [];
  const stop = client.on("push", (push) => kinds.push(push.kind));
  const states = [];
  client.on("connection", (event) => states.push(event.kind));
  await client.connect();
  await client.subscribeChannel({ channel: "ears", withLock: true, withPresence: false });
  for (let i = 0; i < 50 && !kinds.includes("lockEvent"); i++) await pause(20);
  assert.deepEqual(kinds, ["lockEvent"]);
  stop();
  await client.logout();
  assert.deepEqual(states, ["connected", "disconnected"]);
});

test("info counts the sessions, channels, subscriptions and writes made, and is for admins only", async () => {
  const gateway = await new Gateway({ secret: SECRET }).start();
  try {
    const root = new Client(gateway.tcp, { token: gateway.token("root", { admin: true }) });
    const ana = new Client(gateway.unix, { token: gateway.token("ana") });
    const welcome = await root.connect();
    await ana.connect();
    await root.subscribeChannel({ channel: "room" });
    await ana.subscribeUserMetadata({ userId: "ana" });
    await ana.setUserMetadata({ items: [{ key: "k", value: "1" }] });
    await ana.setUserMetadata({ items: [{ key: "k", value: "2" }, { key: "j", value: "3" }] });
    const info = await root.info();
    assert.equal(info.version, welcome.serverName.split("/")[1]);
    assert.equal(info.sessions, 2);
    assert.equal(info.usersOnline, 2);
    assert.equal(info.channels, 1);
    assert.equal(info.memberships, 1);
    assert.equal(info.userSubscriptions, 1);
    assert.equal(info.metadataSets, 1);
    assert.equal(info.metadataItems, 2);
    assert.equal(info.writesTotal, 2);
    assert.ok(info.writesPerSecond >= 1 && info.writesPerSecond <= 2, `${info.writesPerSecond}`);
    assert.deepEqual(info.nodes ?? [], []);
    const refused = await ana.info().then(() => null, (e) => e);
    assert.ok(refused instanceof ServerError, `${refused}`);
    assert.equal(refused.code, ErrorCode.permissionDenied);
    await ana.logout();
    await root.logout();
  } finally {
    await gateway.remove();
  }
});
