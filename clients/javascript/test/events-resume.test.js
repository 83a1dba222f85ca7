// The replay of online-only events (resumeEvents, SPEC SB-13.4-9) through the JavaScript client against a live
// gateway: a client whose connection is lost gets the events published meanwhile by itself after the reconnect,
// once and in order, and reports the answer in its `restored` event; a fresh client does not ask.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { Client, ReconnectPolicy } from "../src/index.js";
import { Gateway } from "../testlib/gateway.js";

const STEADY = new ReconnectPolicy({ initialDelay: 500, maxDelay: 500, jitter: 0 });
const pause = (ms) => new Promise((r) => setTimeout(r, ms));

let open;
before(async () => { open = await new Gateway().start(); });
after(async () => { await open.remove(); });

/** The next application event (value 10000 and up) of a subscribedEvents stream (one push may carry several). */
const pending = new WeakMap();
async function nextApplicationEvent(pushes) {
  const queue = pending.get(pushes) ?? [];
  pending.set(pushes, queue);
  while (queue.length === 0) {
    const push = await pushes.next(5000);
    queue.push(...push.body.events.filter((e) => e.value >= 10000));
  }
  return queue.shift();
}

test("a client whose connection is lost gets the online-only events missed meanwhile after the reconnect", async () => {
  const tony = new Client(open.unix, { userId: "jse-tony", reconnect: STEADY });
  await tony.connect();
  const pushes = tony.pushes("subscribedEvents");
  const events = tony.connectionEvents();
  const subscribed = await tony.subscribeEvent({ publishers: ["jse-ana"], expirySeconds: 3600 });
  assert.ok(subscribed.epoch > 0);
  assert.equal(tony.eventReplayPosition.epoch, subscribed.epoch);
  const ana = new Client(open.unix, { userId: "jse-ana" });
  await ana.connect();
  await ana.publishEvent({ value: 10001 });
  const live = await nextApplicationEvent(pushes);
  assert.equal(live.value, 10001);
  assert.equal(live.epoch, subscribed.epoch);
  assert.ok(live.position > subscribed.position);
  assert.equal(tony.eventReplayPosition.position, live.position);

  tony.connection.transport.close();                   // lost; the reconnect waits 500 ms
  await pause(100);
  await ana.publishEvent({ value: 10002 });            // missed meanwhile
  await ana.publishEvent({ value: 10003 });
  let restored;
  do restored = await events.next(20000); while (restored.kind !== "restored");
  assert.equal(restored.events.epoch, subscribed.epoch);
  assert.equal(restored.events.gap, false);
  assert.equal(restored.events.replayed, 2);
  const missed = [await nextApplicationEvent(pushes), await nextApplicationEvent(pushes)];
  assert.deepEqual(missed.map((e) => e.value), [10002, 10003]);
  assert.ok(missed[0].position > live.position && missed[1].position > missed[0].position);
  await ana.publishEvent({ value: 10004 });
  assert.equal((await nextApplicationEvent(pushes)).value, 10004);
  await pause(200);
  const extra = await nextApplicationEvent(pushes).then((e) => e, () => null);
  assert.equal(extra, null, "an event arrived twice");
  await ana.logout();
  await tony.logout();
});

test("a client with no position does not ask, and another epoch answers gap", async () => {
  const bo = new Client(open.unix, { userId: "jse-bo", reconnect: STEADY });
  await bo.connect();
  const events = bo.connectionEvents();
  assert.equal(bo.eventReplayPosition, null);
  bo.connection.transport.close();
  let restored;
  do restored = await events.next(20000); while (restored.kind !== "restored");
  assert.equal(restored.events, null);
  const answer = await bo.resumeEvents({ epoch: 1, after: 1 });
  assert.equal(answer.gap, true);
  assert.equal(answer.replayed, 0);
  assert.equal(bo.eventReplayPosition.epoch, answer.epoch);   // it starts over from where the node stands
  await bo.logout();
});
