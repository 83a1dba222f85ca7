// Every live scenario of Protocol/conformance/scenarios.json, each against a gateway of its own, with the
// JavaScript client (the Python client runs the same list in clients/python/tests/test_conformance.py).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Mismatch, Runner, load, matches } from "../testlib/conformance.js";

const DOCUMENT = load();

test("the scenarios cover the areas the list promises", () => {
  const names = new Set(DOCUMENT.scenarios.map((s) => s.name));
  for (const n of ["login.open.tcp", "login.open.unix", "login.token", "storage.revisions", "locks", "presence", "events",
    "profiles", "compression.push", "reconnect.resubscribe", "errors", "logout.goaway"]) assert.ok(names.has(n), n);
});

for (const scenario of DOCUMENT.scenarios) {
  test(`scenario ${scenario.name}`, { timeout: 90000 }, () => new Runner(DOCUMENT, scenario).run());
}

test("the matching rules", () => {
  matches({ a: 1, b: [{ c: "$any" }] }, { a: 1, b: [{ c: 0, d: 2 }], e: 3 });
  for (const [expected, actual] of [[{ a: 1 }, { a: 2 }], [{ a: 1 }, {}], [[1], [1, 2]], [{ a: true }, { a: 1 }], [{ a: "$any" }, {}]]) {
    assert.throws(() => matches(expected, actual), Mismatch);
  }
});
