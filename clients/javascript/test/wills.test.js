// Last wills (setWill / getWill, SPEC 13.10) through the JavaScript client against a live gateway: a connection lost
// without logout runs the will as its user; the client registers the will again on its new session by itself.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { Client, ReconnectPolicy } from "../src/index.js";
import { Gateway } from "../testlib/gateway.js";

const STEADY = new ReconnectPolicy({ initialDelay: 300, maxDelay: 500, jitter: 0 });
const pause = (ms) => new Promise((r) => setTimeout(r, ms));
const STATUS = { operation: 12, items: [{ key: "status", value: "offline" }], recordUserId: true };

let open;
before(async () => { open = await new Gateway().start(); });
after(async () => { await open.remove(); });

/** The parts of a will's actions the test set (answers carry every field, defaults included). */
const brief = (actions = []) => actions.map((a) => [a.operation, a.items.map((i) => [i.key, i.value]), a.recordUserId]);
const BRIEF = brief([STATUS]);

async function statusOf(reader, userId) {
  const { items = [] } = await reader.getUserMetadata({ userId });
  return items.find((item) => item.key === "status");
}

test("a lost connection runs the will as its user, and the client registers the will again on its new session", async () => {
  const ann = new Client(open.unix, { userId: "js-will-ann" });
  await ann.connect();
  const tony = new Client(open.tcp, { userId: "js-will-tony", reconnect: STEADY });
  await tony.connect();
  const events = tony.connectionEvents();
  assert.equal((await tony.setWill({ actions: [STATUS] })).actions, 1);
  assert.deepEqual(brief((await tony.getWill()).actions), BRIEF);

  tony.connection.transport.close();                   // no logout: an abnormal end
  let status;
  for (let i = 0; i < 100 && status?.value !== "offline"; i++) {
    status = await statusOf(ann, "js-will-tony");
    if (status?.value !== "offline") await pause(50);
  }
  assert.equal(status?.value, "offline");
  assert.equal(status.authorUserId, "js-will-tony");

  let restored;
  do restored = await events.next(20000); while (restored.kind !== "restored");
  assert.deepEqual(restored.restored.map(([op]) => op), ["setWill"]);
  assert.deepEqual(brief((await tony.getWill()).actions), BRIEF);

  // A cleared will is not registered again, and logout never runs one.
  await tony.setWill({ actions: [] });
  assert.deepEqual((await tony.getWill()).actions ?? [], []);
  await tony.logout();
  await ann.logout();
});
