// Set TTLs (SPEC SB-13.1-10) through the JavaScript client against a live gateway: setTtlMs on a write, the set's
// expiresAtMs in the response and the set event, one `expired` event with no items and majorRevision 0, the set gone
// from get, a MetadataSetCopy emptied by it, 7017 for a bad setTtlMs.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { Client, ErrorCode, MetadataSetCopy, ServerError } from "../src/index.js";
import { Gateway } from "../testlib/gateway.js";

let open;
before(async () => { open = await new Gateway().start(); });
after(async () => { await open.remove(); });

test("a set written with setTtlMs expires as a whole: one expired event with no items, then get finds no set", async () => {
  const writer = new Client(open.unix, { userId: "js-set-ttl" });
  const watcher = new Client(open.tcp, { userId: "js-set-ttl-watcher" });
  await writer.connect();
  await watcher.connect();
  try {
    const pushes = watcher.pushes("storageEvent");
    await watcher.subscribeChannel({ channel: "js-room", withMetadata: true });
    const copy = new MetadataSetCopy();
    copy.apply((await pushes.next(5000)).body);
    const start = Date.now();
    const written = await writer.setChannelMetadata({
      channel: "js-room", items: [{ key: "topic", value: "ttl" }], setTtlMs: 300,
    });
    assert.ok(written.expiresAtMs >= start + 300 && written.expiresAtMs < start + 10300, String(written.expiresAtMs));
    const set = (await pushes.next(5000)).body;
    assert.equal(set.eventType, "set");
    assert.equal(set.expiresAtMs, written.expiresAtMs);
    copy.apply(set);
    assert.equal(copy.expiresAtMs, written.expiresAtMs);
    const kept = await writer.updateChannelMetadata({ channel: "js-room", items: [{ key: "topic", value: "kept" }] });
    assert.equal(kept.expiresAtMs, written.expiresAtMs);
    copy.apply((await pushes.next(5000)).body);
    const expired = (await pushes.next(5000)).body;
    assert.equal(expired.eventType, "expired");
    assert.deepEqual(expired.items ?? [], []);
    assert.equal(expired.majorRevision ?? 0, 0);
    assert.ok(Date.now() >= written.expiresAtMs);
    copy.apply(expired);
    assert.deepEqual(copy.items, []);
    assert.equal(copy.majorRevision, 0);
    assert.equal(copy.expiresAtMs, 0);
    const got = await writer.getChannelMetadata({ channel: "js-room" });
    assert.deepEqual(got.items ?? [], []);
    assert.equal(got.majorRevision ?? 0, 0);
    await assert.rejects(
      writer.setChannelMetadata({ channel: "js-room", items: [{ key: "k", value: "v" }], setTtlMs: 50 }),
      (error) => error instanceof ServerError && error.code === ErrorCode.invalidTtl && error.code === 7017,
    );
  } finally {
    await writer.logout();
    await watcher.logout();
  }
});
