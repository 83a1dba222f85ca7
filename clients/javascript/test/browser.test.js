// In headless Chromium: a page logs in with the client over the browser's own WebSocket (through the node-ws
// relay in front of a live gateway), joins a channel and sees another client's change arrive, compressed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "../src/index.js";
import { Gateway } from "../testlib/gateway.js";
import { Relay } from "../testlib/relay.js";
import { Chromium, serveFiles } from "../testlib/chromium.js";

const pause = (ms) => new Promise((r) => setTimeout(r, ms));

test("a page in headless Chromium logs in, joins a channel and sees another client's change", { timeout: 90000 }, async () => {
  const gateway = await new Gateway().start();
  const relay = await new Relay(gateway.port).start();
  const files = await serveFiles();
  const chromium = await new Chromium().start();
  const tony = new Client(gateway.tcp, { userId: "tony" });
  try {
    const evaluate = await chromium.open(`${files.url}/page.html?ws=${encodeURIComponent(relay.url)}`);
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
    assert.deepEqual(relay.badMessages, []);
  } finally {
    await tony.logout();
    await chromium.stop();
    await files.close();
    await relay.stop();
    await gateway.remove();
  }
});
