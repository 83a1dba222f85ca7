// The TypeScript declarations (src/index.d.ts, hand-written, and src/generated.d.ts) compile with `tsc --strict`
// (Debian's node-typescript) together with a program that uses the API as the docs do and gets wrong uses refused.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { REPO } from "../testlib/gateway.js";

test("the declarations type-check a program that uses the client, and refuse wrong uses", { timeout: 120000 }, async () => {
  const program = join(REPO, "clients", "javascript", "testlib", "types", "use.mts");
  const args = ["--noEmit", "--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext", program];
  const done = await promisify(execFile)("tsc", args, { timeout: 110000 }).then(() => null, (e) => e);
  assert.equal(done, null, done && `${done.stdout}${done.stderr}`);
});
