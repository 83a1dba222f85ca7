/**
 * A page in the headless Chromium of chromium.js, driven over the DevTools protocol with what the inspector test needs
 * beyond Chromium.open(): a window size, waiting for an expression to hold, and a PNG screenshot.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { REPO } from "./gateway.js";

/** Where tests keep what they leave for a person to look at (screenshots); gitignored. */
export const ARTIFACTS = process.env.SWITCHBOARD_TEST_ARTIFACTS || join(REPO, "test-artifacts");

const pause = (ms) => new Promise((r) => setTimeout(r, ms));

/** Opens `url` in a new tab of `chromium` (a started Chromium) at width × height CSS pixels. */
export async function openPage(chromium, url, { width = 1400, height = 1000 } = {}) {
  const { targetId } = await chromium.send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await chromium.send("Target.attachToTarget", { targetId, flatten: true });
  await chromium.send("Emulation.setDeviceMetricsOverride", { width, height, deviceScaleFactor: 1, mobile: false }, sessionId);
  await chromium.send("Page.enable", {}, sessionId);
  await chromium.send("Page.navigate", { url }, sessionId);

  /** The value of `expression` in the page (promises awaited). */
  const evaluate = async (expression) => {
    const result = await chromium.send("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true }, sessionId);
    if (result.exceptionDetails) throw new Error(`in the page: ${JSON.stringify(result.exceptionDetails).slice(0, 500)}`);
    return result.result.value;
  };

  /** Evaluates `expression` every 100 ms until `accept(value)` holds; returns that value, or throws with the last one. */
  const waitFor = async (expression, accept = Boolean, { timeoutMs = 15000, what = expression } = {}) => {
    const deadline = Date.now() + timeoutMs;
    let value;
    for (;;) {
      try {
        value = await evaluate(expression);
        if (accept(value)) return value;
      } catch (error) {
        value = `(${error.message})`;       // the page may still be loading
      }
      if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}; last: ${JSON.stringify(value)}`);
      await pause(100);
    }
  };

  /** Saves a PNG of the whole page at `path` (directories made); returns the path. */
  const screenshot = async (path) => {
    const { data } = await chromium.send("Page.captureScreenshot", { format: "png", captureBeyondViewport: true }, sessionId);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, Buffer.from(data, "base64"));
    return path;
  };

  const close = () => chromium.send("Target.closeTarget", { targetId });
  return { evaluate, waitFor, screenshot, close };
}
