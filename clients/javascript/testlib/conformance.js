/**
 * Runs the live conformance scenarios of Protocol/conformance/scenarios.json (format: its README.md) with the
 * JavaScript client against a gateway of their own, as clients/python/tests/conformance.py does for Python.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Client, ReconnectPolicy, SwitchboardError } from "../src/index.js";
import { Gateway, REPO, SECRET } from "./gateway.js";

export const SCENARIOS = join(REPO, "Protocol", "conformance", "scenarios.json");

export function load() {
  return JSON.parse(readFileSync(SCENARIOS, "utf8"));
}

export class Mismatch extends Error {}

const show = (x) => JSON.stringify(x, (k, v) => (typeof v === "bigint" ? `${v}` : v));

/** Throws Mismatch unless `actual` matches `expected`: objects by the keys `expected` names (others ignored), arrays
 * element by element with the same length, "$any" anything present, other values by equality (a boolean never
 * equals a number). */
export function matches(expected, actual, where = "$") {
  if (expected === "$any") return;
  if (expected !== null && typeof expected === "object" && !Array.isArray(expected)) {
    if (actual === null || typeof actual !== "object" || Array.isArray(actual)) throw new Mismatch(`${where}: expected an object, got ${show(actual)}`);
    for (const [key, value] of Object.entries(expected)) {
      if (!(key in actual)) throw new Mismatch(`${where}: no ${key} in ${show(actual)}`);
      matches(value, actual[key], `${where}.${key}`);
    }
    return;
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual) || actual.length !== expected.length) {
      throw new Mismatch(`${where}: expected ${expected.length} elements, got ${show(actual)}`);
    }
    expected.forEach((e, i) => matches(e, actual[i], `${where}[${i}]`));
    return;
  }
  if (expected !== actual) throw new Mismatch(`${where}: expected ${show(expected)}, got ${show(actual)}`);
}

/** One scenario: its gateway, its clients (each with a push stream and a connection-event stream from the moment it
 * connects) and the values steps saved. */
export class Runner {
  constructor(document, scenario) {
    this.defaults = document.defaults || {};
    this.scenario = scenario;
    const auth = (scenario.gateway || {}).auth || "open";
    this.gateway = new Gateway({ secret: auth === "token" ? SECRET : null });
    this.clients = {};
    this.pushes = {};
    this.events = {};
    this.saved = {};
    this.timeout = this.defaults.timeoutMs ?? 5000;
  }

  value(v) {
    if (typeof v === "string" && v.startsWith("$") && v.slice(1) in this.saved) return this.saved[v.slice(1)];
    if (Array.isArray(v)) return v.map((x) => this.value(x));
    if (v !== null && typeof v === "object") {
      if ("$repeat" in v) return String(v.$repeat).repeat(Number(v.times));
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.value(x)]));
    }
    return v;
  }

  async run() {
    await this.gateway.start();
    try {
      for (const [i, step] of this.scenario.steps.entries()) {
        try {
          await this.step(step);
        } catch (e) {
          e.message = `step ${i + 1} (${show(step).slice(0, 200)}): ${e.message}`;
          throw e;
        }
      }
    } finally {
      for (const client of Object.values(this.clients)) await client.close();
      await this.gateway.remove();
    }
  }

  async step(step) {
    const d = step.do;
    if (d === "restartGateway") return this.gateway.restart();
    if (d === "sleep") return new Promise((r) => setTimeout(r, step.ms));
    const name = step.client;
    if (d === "connect") return this.connect(name, step);
    if (d === "request") return this.request(name, step);
    if (d === "push") return this.push(name, step);
    if (d === "awaitRestored") return this.restored(name, step);
    if (d === "logout") return this.logout(name, step);
    if (d === "close") {
      const client = this.clients[name];
      delete this.clients[name];
      return client.close();
    }
    throw new Error(`unknown step ${d}`);
  }

  async connect(name, step) {
    const spec = this.scenario.clients[name];
    let token = "";
    if (spec.token !== undefined) {
      token = typeof spec.token === "string" ? spec.token : this.gateway.token(spec.token.user, { admin: spec.token.admin ?? false });
    }
    const client = new Client(this.gateway.endpoint(spec.transport || "tcp"), {
      userId: spec.user ?? "", token, deviceId: spec.device ?? "", compression: spec.compression ?? true,
      reconnect: new ReconnectPolicy({ initialDelay: 100, maxDelay: 500, jitter: 0.1 }), requestTimeout: this.timeout,
    });
    const pushes = client.pushes(), events = client.connectionEvents();
    let welcome;
    try {
      welcome = await client.connect();
    } catch (e) {
      if (!(e instanceof SwitchboardError) || step.expectError === undefined) throw e;
      matches(step.expectError, { code: e.code, name: e.codeName });
      return;
    }
    if (step.expectError !== undefined) throw new Mismatch(`connected, expected ${show(step.expectError)}`);
    matches(this.value(step.expect || {}), welcome);
    this.clients[name] = client;
    this.pushes[name] = pushes;
    this.events[name] = events;
  }

  async request(name, step) {
    let response;
    try {
      response = await this.clients[name].call(step.op, this.value(step.args || {}));
    } catch (e) {
      if (!(e instanceof SwitchboardError) || step.expectError === undefined) throw e;
      matches(this.value(step.expectError), { ...e.body, code: e.code, name: e.codeName });
      return;
    }
    if (step.expectError !== undefined) throw new Mismatch(`${step.op} succeeded with ${show(response)}, expected ${show(step.expectError)}`);
    matches(this.value(step.expect || {}), response);
    for (const [variable, field] of Object.entries(step.save || {})) this.saved[variable] = response[field];
  }

  /** The first push of the kind that matches, within the time limit (other pushes are passed over). */
  async push(name, step) {
    const stream = this.pushes[name], kind = step.kind;
    const expected = this.value(step.expect || {});
    const deadline = Date.now() + (step.withinMs ?? this.defaults.pushWithinMs ?? 5000);
    const seen = [];
    for (;;) {
      let push;
      try {
        push = await stream.next(Math.max(0, deadline - Date.now()));
      } catch {
        throw new Mismatch(`no ${kind} push matching ${show(expected).slice(0, 300)} arrived; ${kind} pushes seen: ${show(seen).slice(0, 1200)}`);
      }
      if (push.kind !== kind) continue;
      try {
        matches(expected, push.body);
      } catch (e) {
        if (!(e instanceof Mismatch)) throw e;
        seen.push(push.body);
        continue;
      }
      if (step.compressed !== undefined && push.compressed !== step.compressed) {
        throw new Mismatch(`the ${kind} push arrived ${push.compressed ? "" : "un"}compressed`);
      }
      return;
    }
  }

  /** The client reconnected: a `restored` event whose restored ops are `expect.restored` (in order). */
  async restored(name, step) {
    const stream = this.events[name];
    const deadline = Date.now() + (step.withinMs ?? 20000);
    for (;;) {
      const event = await stream.next(Math.max(0, deadline - Date.now()));
      if (event.kind === "restored") {
        matches(step.expect || {}, { restored: event.restored.map(([op]) => op), failed: event.failed.map(([op]) => op) });
        return;
      }
    }
  }

  async logout(name, step) {
    const client = this.clients[name];
    delete this.clients[name];
    const connection = client.connection;
    await client.logout();
    if (step.expectGoAway !== undefined) {
      if (connection.goaway === null) throw new Mismatch("no GOAWAY arrived after logout");
      matches(step.expectGoAway, connection.goaway);
    }
  }
}
