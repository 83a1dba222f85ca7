// Docs/javascript-client.md: its example is examples/quickstart.mjs, word for word, and runs against a live
// gateway; the page's other js blocks run too, in order, as one async function against a live gateway.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import * as index from "../src/index.js";
import { Gateway, REPO } from "../testlib/gateway.js";

const DOC = join(REPO, "Docs", "javascript-client.md");
const EXAMPLE = join(REPO, "clients", "javascript", "examples", "quickstart.mjs");
const blocks = () => [...readFileSync(DOC, "utf8").matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);

let gateway;
before(async () => { gateway = await new Gateway().start(); });
after(async () => { await gateway.remove(); });

test("the doc shows the example file word for word, in ten lines", () => {
  const example = readFileSync(EXAMPLE, "utf8");
  assert.equal(blocks()[0], example);
  assert.ok(example.trim().split("\n").length <= 10);
});

test("the example runs against a live gateway over TCP and the Unix socket", async () => {
  for (const endpoint of [gateway.tcp, gateway.unix]) {
    const { stdout } = await promisify(execFile)(process.execPath, [EXAMPLE, endpoint], { timeout: 60000 });
    assert.equal(stdout, "tony set news\n");
  }
});

test("the other blocks of the doc run in order", async () => {
  const rest = blocks().slice(1);
  assert.ok(rest.length >= 5);
  const AsyncFunction = (async () => {}).constructor;
  const asserts = [];
  const console = { assert: (ok) => asserts.push(Boolean(ok)) };
  const run = new AsyncFunction("endpoint", "console", ...Object.keys(index), rest.join("\n"));
  await run(gateway.tcp, console, ...Object.values(index));
  assert.ok(asserts.length >= 4);
  assert.ok(asserts.every(Boolean), JSON.stringify(asserts));
});
