// In headless Chromium: a page logs in with the client over the browser's own WebSocket to the gateway's WebSocket
// listener (its origin on --websocket-origins), joins a channel and sees another client's change arrive, compressed,
// and a channel broadcast, which it answers with its own; a page of an origin not on the list is refused.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "../src/index.js";
import { Gateway } from "../testlib/gateway.js";
import { Chromium, serveFiles } from "../testlib/chromium.js";

const pause = (ms) => new Promise((r) => setTimeout(r, ms));

test("a page in headless Chromium logs in, joins a channel and sees another client's change", { timeout: 90000 }, async () => {
  const files = await serveFiles();
  const gateway = await new Gateway({ websocket: true, origins: [files.url] }).start();
  const chromium = await new Chromium().start();
  const tony = new Client(gateway.tcp, { userId: "tony" });
  try {
    const evaluate = await chromium.open(`${files.url}/page.html?ws=${encodeURIComponent(gateway.websocketUrl)}`);
    let joined;
    for (let i = 0; i < 100 && joined === undefined; i++) {
      if (await evaluate("typeof window.joined === 'object'")) joined = await evaluate("window.joined");
      else await pause(100);
    }
    assert.deepEqual(joined, { userId: "browser", features: ["zlib"], hasGlobalWebSocket: true });
    assert.equal(await evaluate("document.getElementById('status').textContent"), "joined lobby as browser");
    await tony.connect();
    const topic = "news ".repeat(400);
    await tony.setChannelMetadata({ channel: "lobby", items: [{ key: "topic", value: topic }] });
    assert.deepEqual(await evaluate("window.change"), { publisher: "tony", compressed: true, length: topic.length });
    assert.equal(await evaluate("document.getElementById('topic').textContent"), topic);

    // A channel broadcast reaches the page, and the page's own reaches tony (SPEC 13.11).
    const atTony = tony.pushes("channelBroadcast");
    await tony.subscribeChannel({ channel: "lobby", withPresence: false });
    await tony.broadcast({ channel: "lobby", data: '{"cursor":[1,2]}' });
    assert.deepEqual(await evaluate("window.broadcast"), { sender: "tony", data: '{"cursor":[1,2]}', answerDelivered: 1 });
    const answer = (await atTony.next(5000)).body;
    assert.equal(answer.sender, "browser");
    assert.equal(answer.data, 'seen {"cursor":[1,2]}');

    // The same page from an origin not on --websocket-origins: the gateway answers the upgrade with 403.
    const elsewhere = await serveFiles();
    try {
      const foreign = await chromium.open(`${elsewhere.url}/page.html?ws=${encodeURIComponent(gateway.websocketUrl)}`);
      let status = "starting";
      for (let i = 0; i < 100 && status === "starting"; i++) {
        status = (await foreign("document.getElementById('status')?.textContent")) ?? "starting";
        if (status === "starting") await pause(100);
      }
      assert.match(status, /^failed: .*WebSocket closed/);
    } finally {
      await elsewhere.close();
    }
  } finally {
    await tony.logout();
    await chromium.stop();
    await files.close();
    await gateway.remove();
  }
});
