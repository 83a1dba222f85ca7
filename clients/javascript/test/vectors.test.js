// The protocol's test vectors (Protocol/vectors) through the JavaScript codec: every one, both ways.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { SCHEMA } from "../src/generated.js";
import { VECTORS, checkVector, parseJson, vectorFiles } from "../testlib/vectors.js";

const ALL = vectorFiles().flatMap(([name, vectors]) => vectors.map((v) => [name, v]));

test("every vector file is read", () => {
  const names = new Set(ALL.map(([name]) => name));
  for (const n of ["frames.json", "compressed.json", "streams.json", "malformed.json", "unknown.json"]) assert.ok(names.has(n), n);
  assert.ok(ALL.length > 300);
});

test("every vector holds both ways", async () => {
  const failures = [];
  for (const [name, v] of ALL) {
    const problem = await checkVector(v);
    if (problem !== null) failures.push(`${name}:${v.name}: ${problem}`);
  }
  assert.deepEqual(failures, []);
});

test("the generated module carries the protocol's schema", () => {
  assert.deepEqual(SCHEMA, parseJson(readFileSync(join(VECTORS, "..", "schema.json"), "utf8")));
});

test("the JSON reader keeps 64-bit integers exact", () => {
  assert.deepEqual(parseJson('{"a": [18446744073709551615, -9223372036854775808, 1, "x\\"y"]}'),
    { a: [18446744073709551615n, -9223372036854775808n, 1, 'x"y'] });
});
