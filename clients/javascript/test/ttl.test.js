// Item TTLs (SPEC SB-13.1-9) through the JavaScript client against a live gateway: ttlMs on a written item, its
// expiresAtMs in the set event, the `expired` event from the server, the item gone from get, 7017 for a bad TTL.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { Client, ErrorCode, ServerError } from "../src/index.js";
import { Gateway } from "../testlib/gateway.js";

let open;
before(async () => { open = await new Gateway().start(); });
after(async () => { await open.remove(); });

test("an item written with ttlMs expires: an expired event with its key, then get no longer returns it", async () => {
  const writer = new Client(open.unix, { userId: "js-ttl" });
  const watcher = new Client(open.tcp, { userId: "js-ttl-watcher" });
  await writer.connect();
  await watcher.connect();
  try {
    const pushes = watcher.pushes("storageEvent");
    await watcher.subscribeUserMetadata({ userId: "js-ttl" });
    assert.equal((await pushes.next(5000)).body.eventType, "snapshot");
    const before = Date.now();
    await writer.setUserMetadata({ items: [{ key: "typing", value: "yes", ttlMs: 300 }, { key: "name", value: "Jo" }] });
    const set = (await pushes.next(5000)).body;
    assert.equal(set.eventType, "set");
    const typing = set.items.find((i) => i.key === "typing");
    assert.ok(typing.expiresAtMs >= before + 300 && typing.expiresAtMs < before + 10300, String(typing.expiresAtMs));
    const expired = (await pushes.next(5000)).body;
    assert.equal(expired.eventType, "expired");
    assert.deepEqual(expired.items.map((i) => i.key), ["typing"]);
    assert.equal(expired.majorRevision, 2);
    assert.ok(Date.now() >= typing.expiresAtMs);
    const got = await writer.getUserMetadata({});
    assert.deepEqual(got.items.map((i) => i.key), ["name"]);
    await assert.rejects(
      writer.setUserMetadata({ items: [{ key: "k", value: "v", ttlMs: 50 }] }),
      (error) => error instanceof ServerError && error.code === ErrorCode.invalidTtl && error.code === 7017,
    );
  } finally {
    await writer.logout();
    await watcher.logout();
  }
});
