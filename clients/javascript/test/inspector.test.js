// The live inspector page (GET /inspector on the metrics endpoint) in headless Chromium: opened with an admin token in
// the URL fragment, it shows the channel another client (the JS client over TCP) joined with its occupancy, the member
// and their state, the channel's metadata, and follows later changes without a reload; values are shown as text.
// A screenshot is kept under test-artifacts/ (its path is printed).
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { Client } from "../src/index.js";
import { Gateway, SECRET, freePort } from "../testlib/gateway.js";
import { Chromium } from "../testlib/chromium.js";
import { ARTIFACTS, openPage } from "../testlib/devtools-page.js";

/** The text of every cell of the body rows of table `id`, row by row. */
const rows = (id) => `[...document.querySelectorAll("#${id} tbody tr")].map((r) => [...r.cells].map((c) => c.textContent))`;
const hasRow = (expected) => (table) => table.some((row) => expected.every((cell, i) => cell === undefined || row[i] === cell));
const text = (id) => `document.getElementById("${id}").textContent`;

test("the inspector page shows channels, members with state, metadata and online users, and follows changes live",
  { timeout: 120000 }, async () => {
    const metricsPort = await freePort();
    const gateway = await new Gateway({ secret: SECRET, extra: ["--metrics-port", String(metricsPort)] }).start();
    const chromium = await new Chromium().start();
    const tony = new Client(gateway.tcp, { token: gateway.token("tony", { admin: true }), deviceId: "tony-laptop" });
    const ann = new Client(gateway.unix, { token: gateway.token("ann", { admin: true }) });
    const inspector = `http://127.0.0.1:${metricsPort}/inspector`;
    try {
      await tony.connect();
      await tony.subscribeChannel({ channel: "lobby" });
      await tony.setState({ channel: "lobby", items: [{ key: "mood", value: "happy" }] });
      await tony.setChannelMetadata({
        channel: "lobby", items: [{ key: "topic", value: "first" }], recordTs: true, recordUserId: true,
      });

      const page = await openPage(chromium, `${inspector}#token=${await gateway.token("root", { admin: true })}`);
      // The channel with its occupancy: 1 user, 1 session.
      await page.waitFor(rows("channels"), hasRow(["lobby", "message", "1", "1"]), { what: "lobby in the channel list" });
      // The token left the address bar (it stays in sessionStorage).
      assert.equal(await page.evaluate("location.hash"), "");
      assert.match(await page.evaluate(text("status")), /^live/);

      // Picking the channel: its member with their state, its metadata with revision and author.
      await page.evaluate(`document.querySelector('#channels tbody tr[data-key="message:lobby"]').click()`);
      await page.waitFor(rows("members"), hasRow(["tony", "mood=happy"]), { what: "tony and his state" });
      await page.waitFor(rows("channel-metadata"), hasRow(["topic", "first", "1", undefined, "tony"]),
        { what: "the topic" });
      assert.equal(await page.evaluate(text("channel-summary")), "1 visible member");

      // Changes made by other clients arrive without a reload: a second member, new state, new metadata (a value
      // that would be markup if the page used innerHTML).
      await ann.connect();
      await ann.subscribeChannel({ channel: "lobby" });
      await tony.setState({ channel: "lobby", items: [{ key: "mood", value: "busy" }] });
      const markup = `<img src=x onerror="window.injected=1">second`;
      await tony.updateChannelMetadata({ channel: "lobby", items: [{ key: "topic", value: markup }], recordUserId: true });
      await page.waitFor(rows("channels"), hasRow(["lobby", "message", "2", "2"]), { what: "occupancy 2" });
      await page.waitFor(rows("members"), (t) => hasRow(["tony", "mood=busy"])(t) && hasRow(["ann", ""])(t),
        { what: "ann, and tony's new state" });
      await page.waitFor(rows("channel-metadata"), hasRow(["topic", markup, "2"]), { what: "the second topic" });
      assert.equal(await page.evaluate("document.querySelectorAll('main img').length"), 0);
      assert.equal(await page.evaluate("window.injected"), undefined);

      // Online users, and a user picked from the members: their session, channels with state, metadata.
      await page.waitFor(rows("users"), (t) => hasRow(["ann", "1"])(t) && hasRow(["tony", "1", "tony-laptop"])(t),
        { what: "ann and tony online" });
      await tony.setUserMetadata({ items: [{ key: "status", value: "in a meeting" }] });
      await page.evaluate(`document.querySelector('#members tbody tr[data-key="tony"]').click()`);
      await page.waitFor(text("user-name"), (v) => v === "tony");
      await page.waitFor(rows("user-channels"), hasRow(["lobby", "message", "mood=busy"]), { what: "tony's channel" });
      await page.waitFor(rows("user-metadata"), hasRow(["status", "in a meeting", "1"]), { what: "tony's metadata" });
      assert.ok(hasRow([undefined, "tony-laptop"])(await page.evaluate(rows("user-sessions"))));
      assert.match(await page.evaluate(text("user-summary")), /^online · 1 session\(s\) here · in 1 channel\(s\)$/);

      // A user's metadata changing shows up live too; a member leaving leaves the list.
      await tony.updateUserMetadata({ items: [{ key: "status", value: "free" }] });
      await page.waitFor(rows("user-metadata"), hasRow(["status", "free", "2"]), { what: "tony's new status" });
      await ann.unsubscribeChannel({ channel: "lobby" });
      await page.waitFor(rows("members"), (t) => t.length === 1 && hasRow(["tony"])(t), { what: "ann gone" });

      const shot = await page.screenshot(join(ARTIFACTS, "inspector.png"));
      console.log(`inspector screenshot: ${shot}`);
      await page.close();

      // A token that is not an admin's is refused, and the page says so.
      const refused = await openPage(chromium, `${inspector}#token=${await gateway.token("joe")}`);
      await refused.waitFor(text("status"), (v) => v.startsWith("token refused: 403 permissionDenied"));
      assert.deepEqual(await refused.evaluate(rows("channels")), []);
      await refused.close();
    } finally {
      await tony.close().catch(() => {});
      await ann.close().catch(() => {});
      await chromium.stop();
      await gateway.remove();
    }
  });
