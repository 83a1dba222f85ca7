// Resumed metadata subscriptions (SPEC SB-13.1-8) against a live gateway: sinceRevision gives the changes since,
// MetadataSetCopy applies them, and a reconnecting client resumes from the last storage event it received.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { Client, MetadataSetCopy, ReconnectPolicy } from "../src/index.js";
import { Gateway } from "../testlib/gateway.js";

const FAST = new ReconnectPolicy({ initialDelay: 100, maxDelay: 500, jitter: 0.1 });
const key = (i) => `k${String(i).padStart(4, "0")}`;
const byKey = (items) => [...items].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));

async function nextSnapshot(pushes) {
  for (;;) {
    const push = await pushes.next(10000);
    if (push.body.eventType === "snapshot") return push.body;
  }
}

let open;
before(async () => { open = await new Gateway().start(); });
after(async () => { await open.remove(); });

test("a resume after 10 changes to a 1,000-item set sends the changed items and removed keys only", async () => {
  const ana = new Client(open.tcp, { userId: "js-ana" });
  const tony = new Client(open.unix, { userId: "js-tony" });
  await ana.connect();
  await tony.connect();
  for (let start = 0; start < 1000; start += 100) {
    const items = Array.from({ length: 100 }, (_, i) => ({ key: key(start + i), value: "v" }));
    await ana.setUserMetadata({ items });
  }
  const pushes = tony.pushes("storageEvent");
  await tony.subscribeUserMetadata({ userId: "js-ana" });
  const whole = await nextSnapshot(pushes);
  assert.equal(whole.items.length, 1000);
  const copy = new MetadataSetCopy();
  copy.apply(whole);
  await tony.unsubscribeUserMetadata({ userId: "js-ana" });
  for (const i of [1, 2, 3, 4, 5, 6, 7, 8]) await ana.setUserMetadata({ items: [{ key: key(i * 100), value: "w" }] });
  await ana.removeUserMetadata({ items: [{ key: key(1) }] });
  await ana.removeUserMetadata({ items: [{ key: key(2) }] });

  await tony.subscribeUserMetadata({ userId: "js-ana", sinceRevision: copy.majorRevision });
  const delta = await nextSnapshot(pushes);
  assert.equal(delta.resumedFrom, copy.majorRevision);
  assert.equal(delta.resumeFailed, false);
  assert.equal(delta.items.length, 8);
  assert.deepEqual(delta.removedKeys, [key(1), key(2)]);
  copy.apply(delta);
  const read = await tony.getUserMetadata({ userId: "js-ana" });
  assert.equal(copy.majorRevision, read.majorRevision);
  assert.deepEqual(byKey(copy.items), byKey(read.items));

  await tony.subscribeUserMetadata({ userId: "js-ana", sinceRevision: read.majorRevision + 3 });
  const future = await nextSnapshot(pushes);
  assert.equal(future.resumeFailed, true);
  assert.equal(future.items.length, 998);
  await ana.close();
  await tony.close();
});

test("after a gateway restart the client resumes its channel subscription from the last revision it received", async () => {
  const gateway = await new Gateway().start();
  try {
    const watcher = new Client(gateway.unix, { userId: "ana", reconnect: FAST });
    const writer = new Client(gateway.tcp, { userId: "tony", reconnect: FAST });
    const events = watcher.connectionEvents();
    const pushes = watcher.pushes("storageEvent");
    await watcher.connect();
    await writer.connect();
    const written = await writer.setChannelMetadata({ channel: "lobby", items: [{ key: "topic", value: "t" }] });
    await watcher.subscribeChannel({ channel: "lobby", withMetadata: true, withPresence: false });
    assert.equal((await nextSnapshot(pushes)).majorRevision, written.majorRevision);
    await gateway.restart();
    for (;;) {
      const event = await events.next(20000);
      if (event.kind === "restored") {
        assert.deepEqual(event.restored.map(([op, body]) => [op, body.sinceRevision]), [["subscribeChannel", written.majorRevision]]);
        break;
      }
    }
    const resumed = await nextSnapshot(pushes);
    assert.equal(resumed.resumedFrom, written.majorRevision);
    assert.equal(resumed.resumeFailed, false);
    assert.deepEqual(resumed.items, []);
    await watcher.logout();
    await writer.logout();
  } finally {
    await gateway.remove();
  }
});
