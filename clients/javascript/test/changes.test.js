// The admin change stream (subscribeChanges, SPEC 13.8) through the JavaScript client against a live gateway:
// changes of matching users only, in position order, and the stream resumed after a lost connection with exactly
// the changes missed.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { Client, ReconnectPolicy } from "../src/index.js";
import { Gateway } from "../testlib/gateway.js";

const STEADY = new ReconnectPolicy({ initialDelay: 300, maxDelay: 500, jitter: 0 });
const pause = (ms) => new Promise((r) => setTimeout(r, ms));

let open;
before(async () => { open = await new Gateway().start(); });
after(async () => { await open.remove(); });

test("the change stream carries matching changes and resumes after a lost connection with the ones missed", async () => {
  const ops = new Client(open.unix, { userId: "js-ops", reconnect: STEADY });
  await ops.connect();
  const pushes = ops.pushes("change");
  const events = ops.connectionEvents();
  const answer = await ops.subscribeChanges({ userPattern: "jsc-*", kinds: ["online", "userMetadata"] });
  assert.ok(answer.epoch > 0);
  assert.equal(answer.gap, false);
  const user = new Client(open.unix, { userId: "jsc-1" });
  const other = new Client(open.unix, { userId: "other-1" });
  await user.connect();
  await other.connect();
  await other.setUserMetadata({ items: [{ key: "k", value: "not mine" }] });
  await user.setUserMetadata({ items: [{ key: "k", value: "one" }] });
  const online = (await pushes.next(5000)).body;
  const first = (await pushes.next(5000)).body;
  assert.deepEqual([online.kind, online.userId, online.onlineValue], ["online", "jsc-1", 1]);
  assert.equal(first.kind, "userMetadata");
  assert.equal(first.items[0].value, "one");
  assert.ok(first.position > online.position && online.position > answer.position);

  ops.connection.transport.close();                    // the admin's connection is lost
  await user.setUserMetadata({ items: [{ key: "k", value: "two" }] });   // missed meanwhile
  let restored;
  do restored = await events.next(20000); while (restored.kind !== "restored");
  assert.deepEqual(restored.restored.map(([op]) => op), ["subscribeChanges"]);
  assert.equal(restored.changeStream.epoch, answer.epoch);
  assert.equal(restored.changeStream.gap, false);
  assert.equal(restored.changeStream.replayed, 1);
  const missed = (await pushes.next(5000)).body;
  assert.equal(missed.items[0].value, "two");
  assert.ok(missed.position > first.position);
  await user.setUserMetadata({ items: [{ key: "k", value: "three" }] });
  const live = (await pushes.next(5000)).body;
  assert.equal(live.items[0].value, "three");
  assert.ok(live.position > missed.position);
  await pause(200);
  const extra = await pushes.next(100).then((p) => p, () => null);
  assert.equal(extra, null, "a change arrived twice, or one not matching arrived");
  await user.logout();
  await other.logout();
  await ops.logout();
});
