/**
 * The protocol's test vectors (Protocol/vectors, format in its README) checked through the JavaScript codec, as
 * clients/python's wire.check_vector does: every frame decodes to its message and encodes to its bytes, every
 * malformed input fails with its code, and the session vectors hold for a server session model.
 */
import { readFileSync, readdirSync } from "node:fs";
import { isDeepStrictEqual } from "node:util";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as wire from "../src/wire.js";

export const VECTORS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "Protocol", "vectors");

/** JSON.parse, except that integers beyond 2^53 - 1 become BigInts (the vectors hold exact 64-bit values). */
export function parseJson(text) {
  let i = 0;
  const ws = () => { while (" \t\n\r".includes(text[i])) i++; };
  const value = () => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const out = {};
      ws();
      if (text[i] === "}") { i++; return out; }
      for (;;) {
        ws();
        const key = string();
        ws();
        i++;                                                  // :
        out[key] = value();
        ws();
        if (text[i++] === "}") return out;                   // else ,
      }
    }
    if (c === "[") {
      i++;
      const out = [];
      ws();
      if (text[i] === "]") { i++; return out; }
      for (;;) {
        out.push(value());
        ws();
        if (text[i++] === "]") return out;
      }
    }
    if (c === '"') return string();
    const m = /^-?\d+(\.\d+)?([eE][+-]?\d+)?|^true|^false|^null/.exec(text.slice(i, i + 400));
    if (m === null) throw new SyntaxError(`bad JSON at ${i}`);
    i += m[0].length;
    if (m[0] === "true") return true;
    if (m[0] === "false") return false;
    if (m[0] === "null") return null;
    if (m[1] === undefined && m[2] === undefined) {
      const n = Number(m[0]);
      return Number.isSafeInteger(n) ? n : BigInt(m[0]);
    }
    return Number(m[0]);
  };
  const string = () => {
    const start = i;
    i++;
    while (text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
    i++;
    return JSON.parse(text.slice(start, i));
  };
  const out = value();
  return out;
}

/** [file name, vectors] of every vector file, by name. */
export function vectorFiles(directory = VECTORS) {
  return readdirSync(directory).filter((n) => n.endsWith(".json")).sort()
    .map((name) => [name, parseJson(readFileSync(join(directory, name), "utf8")).vectors]);
}

function limitsOf(vector) {
  const spec = vector.limits || {};
  return new wire.Limits(spec.maxFrameSize ?? 1048576, spec.maxInflatedSize ?? 1048576, spec.compression ?? true);
}

/** The server's per-connection checks of SPEC 5.1 and 5.4 that depend on the frames alone (the session vectors):
 * HELLO first and once, version 1, zlib negotiation, pre-handshake limits, request ids unique in flight, at most
 * 128 in flight; no request is answered while the bytes are fed. */
export class ServerSession {
  constructor(serverFeatures = ["zlib"], maxInflight = 128) {
    this.ready = false;
    this.features = new Set(serverFeatures);
    this.maxInflight = maxInflight;
    this.inFlight = new Set();
    this.limits = wire.HANDSHAKE_LIMITS;
    this.buffer = new Uint8Array(0);
  }

  async feed(data) {
    const decoder = new wire.StreamDecoder("c2s", this.limits);
    decoder.buffer = data;
    for (;;) {
      decoder.limits = this.limits;                        // one frame at a time: HELLO changes the limits
      const got = wire.splitFrame(decoder.buffer, this.limits);
      if (got === null) return;
      decoder.buffer = decoder.buffer.subarray(got[1]);
      const frame = wire.parseHeader(got[0], "c2s", this.limits);
      if (!this.ready && !(frame.kind === wire.CONTROL && frame.op === 1)) {
        throw new wire.WireError(1007, "the first frame must be HELLO");
      }
      if (frame.kind === wire.REQUEST) {
        if (this.inFlight.has(frame.requestId)) {
          throw new wire.WireError(1014, `request id ${frame.requestId} is already in flight`, frame.requestId);
        }
        if (this.inFlight.size >= this.maxInflight) {
          throw new wire.WireError(3001, `more than ${this.maxInflight} requests in flight`, frame.requestId);
        }
      }
      const message = wire.frameToMessage(frame, await wire.frameBody(frame, this.limits));
      this.check(message);
    }
  }

  check(msg) {
    if (!this.ready) {
      if ((msg.body.protocolVersion ?? 0) !== 1) throw new wire.WireError(1008, "protocol version is not 1");
      const agreed = (msg.body.features || []).filter((f) => this.features.has(f));
      this.ready = true;
      this.limits = new wire.Limits(1048576, 1048576, agreed.includes("zlib"));
      return;
    }
    if (msg.kind === "control") {
      if (msg.op === "hello") throw new wire.WireError(1007, "HELLO twice");
      if (msg.op === "welcome") throw new wire.WireError(1004, "a client may not send WELCOME");
      return;
    }
    this.inFlight.add(msg.requestId);
  }
}

const show = (x) => JSON.stringify(x, (k, v) => (typeof v === "bigint" ? `${v}n` : v)).slice(0, 300);

/** null when the vector holds both ways, else what went wrong. */
export async function checkVector(v) {
  const data = wire.fromHex(v.hex);
  const direction = v.direction || "any";
  if (v.expectError) {
    const want = v.expectError;
    try {
      if (v.layer === "session") {
        await new ServerSession().feed(data);
      } else {
        const decoder = new wire.StreamDecoder(direction, limitsOf(v));
        await decoder.feed(data);
        decoder.close();
      }
    } catch (e) {
      if (!(e instanceof wire.WireError)) return `expected ${show(want)}, got ${e}`;
      const got = { code: e.code, name: e.codeName, requestId: e.requestId, fatal: e.fatal };
      return isDeepStrictEqual(got, want) ? null : `expected ${show(want)}, got ${show(got)} (${e.detail})`;
    }
    return `expected ${show(want)}, decoded without error`;
  }
  try {
    if (v.messages) {
      const whole = await new wire.StreamDecoder(direction).feed(data);
      const trickle = [], dec = new wire.StreamDecoder(direction);
      for (let i = 0; i < data.length; i++) trickle.push(...(await dec.feed(data.subarray(i, i + 1))));
      dec.close();
      if (!isDeepStrictEqual(whole, v.messages) || !isDeepStrictEqual(trickle, v.messages)) {
        return `stream decodes to ${show(whole)}`;
      }
      const again = wire.toHex(Uint8Array.from(v.messages.flatMap((m) => [...wire.encodeSync(m)])));
      if (again === v.hex || v.canonical === false || v.compressed) return null;
      return `re-encoding differs: ${again.slice(0, 200)}`;
    }
    const got = await wire.decode(data, direction, limitsOf(v));
    if (!isDeepStrictEqual(got, v.message)) return `decodes to ${show(got)}`;
    if (v.compressed) {
      const length = wire.peekVarint(data, 0, 4);
      if (!(data[length[1]] & wire.F_COMPRESSED)) return "COMPRESSED flag is not set";
      const again = await wire.decode(await wire.encode(v.message, { compress: true }), direction);
      return isDeepStrictEqual(again, v.message) ? null : "re-encoding differs";
    }
    const again = wire.toHex(wire.encodeSync(v.message));
    return again === (v.canonicalHex || v.hex) ? null : `re-encodes to ${again}`;
  } catch (e) {
    return `unexpected error: ${e && e.stack ? e.stack : e}`;
  }
}
