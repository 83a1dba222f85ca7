/**
 * The Switchboard wire protocol v1 codec (Protocol/SPEC.md), driven by the schema (generated.js), no dependencies.
 *
 * Messages are canonical JSON renderings (SPEC 10): `{kind, op, requestId, body}` or, for error responses,
 * `{kind: "response", op, requestId, error}`. Integers are numbers, or BigInts beyond 2^53 - 1. Decoding a frame
 * with the COMPRESSED flag is asynchronous (the platform's DecompressionStream("deflate")), so the frame functions
 * return promises; `encode` is asynchronous for the same reason when it compresses.
 *
 *   encode(message, {compress, threshold}) -> Promise<Uint8Array>   encodeSync(message) -> Uint8Array (plain)
 *   decode(bytes, direction, limits) -> Promise<message>            exactly one whole frame
 *   new StreamDecoder(direction, limits).feed(bytes) -> Promise<message[]>   any split of a byte stream
 */
import { SCHEMA } from "./generated.js";

export const CONTROL = 0, REQUEST = 1, RESPONSE = 2, PUSH = 3;             // type byte bits 7-6 (SPEC 2.3)
export const KIND_NAMES = ["control", "request", "response", "push"];
export const F_COMPRESSED = 0x01, F_ERROR = 0x02;                         // flags byte (SPEC 2.2)
export const MAX_U32 = 4294967295;
const MAX_U64 = (1n << 64n) - 1n;
const MIN_S64 = -(1n << 63n), MAX_S64 = (1n << 63n) - 1n;
export const MAX_REPEATED = 10000;                                         // elements per repeated field (SPEC 3.2)
export const ABSOLUTE_MAX_FRAME = 268435455;                               // largest 4-byte length field value

/** @type {Record<number, any>} */
export const ERRORS = Object.fromEntries(SCHEMA.errors.map((e) => [e.code, e]));
/** @type {Record<string, Record<string, number>>} */
export const ENUMS = Object.fromEntries(Object.entries(SCHEMA.enums).map(([n, e]) => [n, e.values]));
/** @type {Record<string, Record<number, string>>} */
const ENUM_NAMES = Object.fromEntries(Object.entries(ENUMS).map(([n, vals]) =>
  [n, Object.fromEntries(Object.entries(vals).map(([k, v]) => [v, k]))]));
/** @type {Record<string, any[]>} */
export const STRUCTS = Object.fromEntries(Object.entries(SCHEMA.structs).map(([n, s]) => [n, s.fields]));
export const OPS = Object.fromEntries(SCHEMA.operations.map((o) => [o.op, o]));
export const OPS_BY_NAME = Object.fromEntries(SCHEMA.operations.map((o) => [o.name, o]));
export const CONTROLS = Object.fromEntries(SCHEMA.controls.map((c) => [c.op, c]));
export const CONTROLS_BY_NAME = Object.fromEntries(SCHEMA.controls.map((c) => [c.name, c]));
export const PUSHES = Object.fromEntries(SCHEMA.pushes.map((p) => [p.code, p]));
export const PUSHES_BY_NAME = Object.fromEntries(SCHEMA.pushes.map((p) => [p.name, p]));

const has = (object, key) => Object.prototype.hasOwnProperty.call(object, key);

/** The field list of an op's request or response; a string names another op whose fields are shared. */
export function opFields(op, side) {
  let spec = op[side];
  while (typeof spec === "string") spec = OPS_BY_NAME[spec][side];
  return spec;
}

/** A protocol error with its code (SPEC 9). `requestId` is set when the error is about one well-framed request or
 * response, which is then answered (or failed) alone; every other error closes the connection. */
export class WireError extends Error {
  constructor(code, message, requestId = null, op = null) {
    super(`${ERRORS[code] ? ERRORS[code].name : "?"}(${code}): ${message}`);
    this.code = code;
    this.detail = message;
    this.requestId = requestId;
    this.op = op;
  }

  get codeName() {
    return ERRORS[this.code].name;
  }

  get fatal() {
    return !(ERRORS[this.code].open && this.requestId !== null);
  }
}

/** The JSON given to the encoder is not a valid canonical rendering. */
export class JsonError extends TypeError {}

/** What a receiver accepts (SPEC 11). */
export class Limits {
  constructor(maxFrameSize = 1048576, maxInflatedSize = 1048576, compression = true) {
    this.maxFrameSize = Math.min(maxFrameSize, ABSOLUTE_MAX_FRAME);
    this.maxInflatedSize = maxInflatedSize;
    this.compression = compression;
  }
}

export const DEFAULT_LIMITS = new Limits();
export const HANDSHAKE_LIMITS = new Limits(16384, 16384, false);

// ------------------------------------------------------------------------------------------------ varints (SPEC 3.1)

export const NEED = "need", INVALID = "invalid";

/** A BigInt as a number when that is exact, else the BigInt. */
function narrow(value) {
  return value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(value) : value;
}

/** [value, size], NEED when data ends first, or INVALID: longer than maxBytes, overlong, or over 64 bits. */
export function peekVarint(data, pos, maxBytes) {
  let value = 0, big = null, count = 0;
  for (;;) {
    if (pos + count >= data.length) return count >= maxBytes ? INVALID : NEED;
    if (count >= maxBytes) return INVALID;
    const byte = data[pos + count];
    count += 1;
    if (count === 10 && byte > 1) return INVALID;                       // payload bits beyond 2^64
    if (count <= 7) {
      value += (byte & 0x7f) * 2 ** (7 * (count - 1));                  // exact up to 49 bits
    } else {
      if (big === null) big = BigInt(value);
      big |= BigInt(byte & 0x7f) << BigInt(7 * (count - 1));
    }
    if (byte < 0x80) {
      if (byte === 0 && count > 1) return INVALID;                       // overlong: a final 00 group adds nothing
      return [big === null ? value : narrow(big), count];
    }
  }
}

/** Minimal unsigned LEB128 of a number or BigInt in 0 .. 2^64-1, appended to `out` (an array of bytes). */
export function putUvarint(out, n) {
  if (typeof n === "bigint") {
    while (n >= 0x80n) {
      out.push(Number(n & 0x7fn) | 0x80);
      n >>= 7n;
    }
    out.push(Number(n));
    return out;
  }
  while (n >= 0x80) {
    out.push((n % 0x80) | 0x80);
    n = Math.floor(n / 0x80);
  }
  out.push(n);
  return out;
}

export function uvarint(n) {
  return Uint8Array.from(putUvarint([], n));
}

export function zigzag(n) {
  if (typeof n === "number" && Math.abs(n) < 2 ** 51) return n >= 0 ? 2 * n : -2 * n - 1;
  const b = BigInt(n);
  return narrow(((b << 1n) ^ (b >> 63n)) & MAX_U64);
}

export function unzigzag(u) {
  if (typeof u === "number") return u % 2 === 0 ? u / 2 : -(u + 1) / 2;
  return narrow((u >> 1n) ^ -(u & 1n));
}

// ------------------------------------------------------------------------------------------------ bodies (SPEC 3)

const WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5;
const utf8Decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const utf8Encoder = new TextEncoder();

/** The value a field has when absent (SPEC 3.5), in the codec's internal form (enums as numbers). */
function defaultOf(f) {
  const t = f.type, d = f.default;
  if (f.repeated) return [];
  if (has(STRUCTS, t)) return null;
  if (has(ENUMS, t)) return d !== undefined ? ENUMS[t][d] : 0;
  if (d !== undefined) return d;
  return { string: "", uint: 0, sint: 0, bool: false }[t];
}

class Reader {
  constructor(data) {
    this.data = data;
    this.pos = 0;
  }

  varint() {
    const got = peekVarint(this.data, this.pos, 10);
    if (got === NEED) throw new WireError(1000, "varint runs past the end of the body");
    if (got === INVALID) throw new WireError(1000, "varint is overlong, longer than 10 bytes or over 64 bits");
    this.pos += got[1];
    return got[0];
  }

  chunk() {
    const n = this.varint();
    if (typeof n !== "number" || n > this.data.length - this.pos) {
      throw new WireError(1000, `length ${n} runs past the end of the body`);
    }
    this.pos += n;
    return this.data.subarray(this.pos - n, this.pos);
  }

  skip(wt) {
    if (wt === WT_VARINT) this.varint();
    else if (wt === WT_LEN) this.chunk();
    else {
      const width = wt === WT_I64 ? 8 : 4;
      if (this.data.length - this.pos < width) throw new WireError(1000, "fixed-width field runs past the end of the body");
      this.pos += width;
    }
  }
}

function readScalar(reader, t) {
  if (t === "string") {
    const raw = reader.chunk();
    try {
      return utf8Decoder.decode(raw);
    } catch {
      throw new WireError(1006, "string is not valid UTF-8");
    }
  }
  if (has(STRUCTS, t)) return decodeFields(STRUCTS[t], reader.chunk());
  const v = reader.varint();
  if (t === "uint") return v;
  if (t === "sint") return unzigzag(v);
  if (t === "bool") {
    if (v !== 0 && v !== 1) throw new WireError(1000, `bool holds ${v}`);
    return v === 1;
  }
  if (typeof v !== "number" || v > MAX_U32) throw new WireError(1000, `enum value ${v} does not fit in 32 bits`);
  return v;
}

/** Decodes a body into its canonical JSON rendering (defaults omitted). */
export function decodeFields(fields, data) {
  const byNumber = new Map(fields.map((f) => [f.n, f]));
  const values = {};
  for (const f of fields) values[f.name] = defaultOf(f);
  const r = new Reader(data);
  while (r.pos < data.length) {
    const tag = r.varint();
    if (typeof tag !== "number" || tag >= 2 ** 32) throw new WireError(1000, `field number of tag ${tag} is out of range`);
    const wt = tag % 8, number = Math.floor(tag / 8);
    if (wt !== WT_VARINT && wt !== WT_I64 && wt !== WT_LEN && wt !== WT_I32) {
      throw new WireError(1000, `wire type ${wt} is not allowed`);
    }
    if (number === 0 || number > 536870911) throw new WireError(1000, `field number ${number} is out of range`);
    const f = byNumber.get(number);
    if (f === undefined) {
      r.skip(wt);                                                         // unknown field (SPEC 3.4)
      continue;
    }
    const t = f.type, name = f.name;
    const want = t === "string" || has(STRUCTS, t) ? WT_LEN : WT_VARINT;
    if (f.repeated && has(ENUMS, t) && wt === WT_LEN) {                  // packed repeated enum
      const packed = new Reader(r.chunk());
      while (packed.pos < packed.data.length) {
        if (values[name].length >= MAX_REPEATED) throw new WireError(1000, `field ${name} has more than ${MAX_REPEATED} elements`);
        values[name].push(readScalar(packed, t));
      }
      continue;
    }
    if (wt !== want) throw new WireError(1000, `field ${number} (${name}) has wire type ${wt}`);
    if (f.repeated) {
      if (values[name].length >= MAX_REPEATED) throw new WireError(1000, `field ${name} has more than ${MAX_REPEATED} elements`);
      values[name].push(readScalar(r, t));
    } else {
      values[name] = readScalar(r, t);                                     // a repeated singular field: the last wins
    }
  }
  return render(fields, values);
}

function render(fields, values) {
  const out = {};
  for (const f of fields) {
    const v = values[f.name], t = f.type;
    const show = has(ENUMS, t) ? (x) => (has(ENUM_NAMES[t], x) ? ENUM_NAMES[t][x] : x) : (x) => x;
    if (f.repeated) {
      if (v.length) out[f.name] = v.map(show);
    } else if (v !== null && (has(STRUCTS, t) || v !== defaultOf(f))) {
      out[f.name] = show(v);
    }
  }
  return out;
}

/** A received body with every field present: absent fields at their defaults (enums by name, structs null). */
export function withDefaults(fields, body) {
  const out = {};
  for (const f of fields) {
    const t = f.type;
    if (has(body, f.name)) {
      const v = body[f.name];
      if (has(STRUCTS, t)) {
        out[f.name] = f.repeated ? v.map((x) => withDefaults(STRUCTS[t], x)) : withDefaults(STRUCTS[t], v);
      } else {
        out[f.name] = v;
      }
    } else if (f.repeated) {
      out[f.name] = [];
    } else if (has(STRUCTS, t)) {
      out[f.name] = null;
    } else if (has(ENUMS, t)) {
      const d = defaultOf(f);
      out[f.name] = has(ENUM_NAMES[t], d) ? ENUM_NAMES[t][d] : d;
    } else {
      out[f.name] = defaultOf(f);
    }
  }
  return out;
}

function isInteger(v) {
  return (typeof v === "number" && Number.isInteger(v)) || typeof v === "bigint";
}

/** A JSON value of field f, checked, in the internal form (enum -> number, message -> encoded bytes). */
function normalize(f, v, where) {
  const t = f.type;
  if (t === "string") {
    if (typeof v !== "string") throw new JsonError(`${where}: expected a string`);
    if (typeof v.isWellFormed === "function" && !v.isWellFormed()) {
      throw new JsonError(`${where}: string holds a lone surrogate, which UTF-8 cannot encode`);
    }
    return v;
  }
  if (t === "bool") {
    if (typeof v !== "boolean") throw new JsonError(`${where}: expected true or false`);
    return v;
  }
  if (has(STRUCTS, t)) return encodeFields(STRUCTS[t], v, where);
  if (has(ENUMS, t) && typeof v === "string") {
    if (!has(ENUMS[t], v)) throw new JsonError(`${where}: ${JSON.stringify(v)} is not a ${t}`);
    return ENUMS[t][v];
  }
  const [lo, hi] = t === "uint" ? [0n, MAX_U64] : t === "sint" ? [MIN_S64, MAX_S64] : [0n, BigInt(MAX_U32)];
  if (!isInteger(v) || BigInt(v) < lo || BigInt(v) > hi) {
    throw new JsonError(`${where}: expected an integer in ${lo}..${hi}`);
  }
  return typeof v === "bigint" ? narrow(v) : v;
}

function encodeField(out, f, v) {
  const n = f.n, t = f.type;
  if (t === "string" || has(STRUCTS, t)) {
    const raw = t === "string" ? utf8Encoder.encode(v) : v;
    putUvarint(out, n * 8 + WT_LEN);
    putUvarint(out, raw.length);
    for (let i = 0; i < raw.length; i++) out.push(raw[i]);
    return;
  }
  putUvarint(out, n * 8 + WT_VARINT);
  putUvarint(out, t === "sint" ? zigzag(v) : t === "bool" ? (v ? 1 : 0) : v);
}

/** Canonical encoding of a JSON object: ascending field numbers, defaults omitted, repeated fields unpacked. */
export function encodeFields(fields, obj, where = "body") {
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) throw new JsonError(`${where}: expected an object`);
  const known = new Map(fields.map((f) => [f.name, f]));
  for (const key of Object.keys(obj)) {
    if (!known.has(key)) throw new JsonError(`${where}: no field named ${JSON.stringify(key)}`);
  }
  const out = [];
  for (const f of [...fields].sort((a, b) => a.n - b.n)) {
    if (!has(obj, f.name) || obj[f.name] === undefined) continue;
    const whereF = `${where}.${f.name}`;
    const v = obj[f.name];
    if (f.repeated) {
      if (!Array.isArray(v)) throw new JsonError(`${whereF}: expected an array`);
      v.forEach((element, i) => encodeField(out, f, normalize(f, element, `${whereF}[${i}]`)));
      continue;
    }
    const value = normalize(f, v, whereF);
    if (has(STRUCTS, f.type) || value !== defaultOf(f)) encodeField(out, f, value);
  }
  return Uint8Array.from(out);
}

// ------------------------------------------------------------------------------------------------ compression (SPEC 4)

/** Adler-32 of bytes (RFC 1950). */
function adler32(bytes) {
  let a = 1, b = 0;
  for (let i = 0; i < bytes.length;) {
    const end = Math.min(i + 3800, bytes.length);
    for (; i < end; i++) {
      a += bytes[i];
      b += a;
    }
    a %= 65521;
    b %= 65521;
  }
  return ((b << 16) | a) >>> 0;
}

/** Reads a web stream to its end into one Uint8Array; rejects once more than `bound` bytes came out. */
async function collect(readable, bound) {
  const reader = readable.getReader();
  const chunks = [];
  let total = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    total += value.length;
    if (total > bound) {
      reader.cancel().catch(() => {});
      return null;
    }
    chunks.push(value);
  }
  const out = new Uint8Array(total);
  let pos = 0;
  for (const c of chunks) {
    out.set(c, pos);
    pos += c.length;
  }
  return out;
}

async function pipeThrough(transform, bytes, bound) {
  const writer = transform.writable.getWriter();
  writer.write(bytes).catch(() => {});
  writer.close().catch(() => {});
  return collect(transform.readable, bound);
}

/** One zlib stream (RFC 1950) that must inflate to exactly `declared` bytes; never keeps more than declared + 1
 * bytes, whatever the stream says (SPEC 4-4). */
export async function inflate(stream, declared) {
  if (stream.length < 6) throw new WireError(1002, "zlib stream is truncated");
  const cmf = stream[0], flg = stream[1];
  if ((cmf & 0x0f) !== 8 || cmf >> 4 > 7 || ((cmf << 8) | flg) % 31 !== 0) {
    throw new WireError(1002, "zlib header is not valid (CM 8, CINFO <= 7, FCHECK)");
  }
  if (flg & 0x20) throw new WireError(1002, "zlib stream asks for a preset dictionary");
  let out;
  try {
    out = await pipeThrough(new DecompressionStream("deflate"), stream, declared);
  } catch (e) {
    throw new WireError(1002, `zlib: ${e && e.message ? e.message : e}`);
  }
  if (out === null) throw new WireError(1002, `stream inflates past the declared ${declared} bytes`);
  if (out.length !== declared) throw new WireError(1002, `stream inflates to ${out.length} bytes, header declared ${declared}`);
  // DecompressionStream stops at the stream's end and ignores what follows: the Adler-32 must be the body's last
  // four bytes, or bytes follow the stream.
  const n = stream.length, sum = adler32(out);
  const tail = ((stream[n - 4] << 24) | (stream[n - 3] << 16) | (stream[n - 2] << 8) | stream[n - 1]) >>> 0;
  if (tail !== sum) throw new WireError(1002, "bytes follow the end of the zlib stream");
  return out;
}

/** A zlib stream (RFC 1950) of bytes. */
export async function deflate(bytes) {
  return pipeThrough(new CompressionStream("deflate"), bytes, Infinity);
}

// ------------------------------------------------------------------------------------------------ frames (SPEC 2)

const ALLOWED = { c2s: [CONTROL, REQUEST], s2c: [CONTROL, RESPONSE, PUSH], any: [CONTROL, REQUEST, RESPONSE, PUSH] };

/** [the frame's bytes after its length field, bytes it took], or null when buf does not hold a whole frame yet. The
 * length is checked before any of the body is awaited (SPEC 2.1). */
export function splitFrame(buf, limits = DEFAULT_LIMITS) {
  const got = peekVarint(buf, 0, 4);
  if (got === NEED) return null;
  if (got === INVALID) throw new WireError(1005, "length field is longer than 4 bytes or not minimal");
  const [length, size] = got;
  if (length > limits.maxFrameSize) throw new WireError(1001, `frame length ${length} is over the limit of ${limits.maxFrameSize}`);
  if (length < 2) throw new WireError(1004, `frame length ${length} is shorter than a header`);
  if (buf.length < size + length) return null;
  return [buf.subarray(size, size + length), size + length];
}

/**
 * The header checks of one frame (the bytes after its length field); the body is still compressed.
 * @returns {{kind: number, op: number, flags: number, requestId: number | null, body: Uint8Array}}
 */
export function parseHeader(data, direction = "any", limits = DEFAULT_LIMITS) {
  const flags = data[0], typeByte = data[1];
  const kind = typeByte >> 6, op = typeByte & 0x3f;
  if (flags & ~(F_COMPRESSED | F_ERROR)) throw new WireError(1004, `reserved flag bits 0x${flags.toString(16)} are set`);
  if (!ALLOWED[direction].includes(kind)) throw new WireError(1004, `a ${KIND_NAMES[kind]} frame may not be sent in this direction`);
  if (flags & F_ERROR && kind !== RESPONSE) throw new WireError(1004, `ERROR flag on a ${KIND_NAMES[kind]} frame`);
  let pos = 2, requestId = null;
  if (kind === REQUEST || kind === RESPONSE) {
    const got = peekVarint(data, pos, 5);
    if (got === NEED) throw new WireError(1004, "request id runs past the end of the frame");
    if (got === INVALID) throw new WireError(1005, "request id is longer than 5 bytes or not minimal");
    if (got[0] < 1 || got[0] > MAX_U32) throw new WireError(1012, `request id ${got[0]} is out of range`);
    requestId = got[0];
    pos += got[1];
  }
  return { kind, op, flags, requestId, body: data.subarray(pos) };
}

/** The frame's body, inflated when it is compressed (SPEC 4). */
export async function frameBody(frame, limits = DEFAULT_LIMITS) {
  if (!(frame.flags & F_COMPRESSED)) return frame.body;
  if (!limits.compression) throw new WireError(1003, "COMPRESSED flag without the zlib feature");
  const got = peekVarint(frame.body, 0, 5);
  if (got === NEED || got === INVALID) throw new WireError(1002, "inflated-length varint is missing, overlong or longer than 5 bytes");
  const [declared, size] = got;
  if (declared > limits.maxInflatedSize) throw new WireError(1010, `body declares ${declared} inflated bytes, limit ${limits.maxInflatedSize}`);
  if (declared === 0) throw new WireError(1002, "compressed body declares 0 inflated bytes");
  return inflate(frame.body.subarray(size), declared);
}

/** The canonical JSON rendering of a frame whose body is plain (SPEC 10). */
export function frameToMessage(frame, body) {
  const { kind, op, requestId } = frame;
  try {
    if (kind === CONTROL) {
      if (!has(CONTROLS, op)) throw new WireError(1004, `unknown control op ${op}`);
      return { kind: "control", op: CONTROLS[op].name, body: decodeFields(CONTROLS[op].fields, body) };
    }
    if (kind === PUSH) {
      if (!has(PUSHES, op)) return { kind: "push", op, body: {} };          // unknown push: ignored, not parsed
      return { kind: "push", op: PUSHES[op].name, body: decodeFields(PUSHES[op].fields, body) };
    }
    if (kind === RESPONSE && frame.flags & F_ERROR) {
      let error = decodeFields(STRUCTS.ErrorBody, body);
      if (has(ERRORS, error.code)) error = { code: error.code, name: ERRORS[error.code].name, ...error };
      return { kind: "response", op: has(OPS, op) ? OPS[op].name : op, requestId, error };
    }
    if (!has(OPS, op)) throw new WireError(1013, `unknown op ${op}`);
    const side = kind === REQUEST ? "request" : "response";
    return { kind: side, op: OPS[op].name, requestId, body: decodeFields(opFields(OPS[op], side), body) };
  } catch (e) {
    if (e instanceof WireError) {
      e.requestId = requestId;                      // null for control and push frames: those errors are fatal
      e.op = op;
    }
    throw e;
  }
}

/** Header checks, decompression and body decoding of one frame (the bytes after its length field). */
export async function parseFrame(data, direction = "any", limits = DEFAULT_LIMITS) {
  const frame = parseHeader(data, direction, limits);
  const body = await frameBody(frame, limits);      // compression errors are fatal whatever the class (SPEC 4)
  return { message: frameToMessage(frame, body), compressed: (frame.flags & F_COMPRESSED) !== 0 };
}

/** Decodes exactly one whole frame. */
export async function decode(data, direction = "any", limits = DEFAULT_LIMITS) {
  const got = splitFrame(data, limits);
  if (got === null) throw new WireError(1011, "the input ends inside a frame");
  if (got[1] !== data.length) throw new Error(`${data.length - got[1]} bytes after the frame`);
  return (await parseFrame(got[0], direction, limits)).message;
}

function concat(a, b) {
  if (a.length === 0) return b;
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/** Splits a byte stream into messages, whatever the reads look like (SPEC 2, 17). Feed it in order. */
export class StreamDecoder {
  constructor(direction = "any", limits = DEFAULT_LIMITS) {
    this.direction = direction;
    this.limits = limits;
    this.buffer = new Uint8Array(0);
  }

  /** The whole frames now in the buffer as [frame bytes after the length, ...], removed from the buffer. */
  push(data) {
    this.buffer = concat(this.buffer, data);
    const frames = [];
    for (;;) {
      const got = splitFrame(this.buffer, this.limits);
      if (got === null) return frames;
      frames.push(got[0]);
      this.buffer = this.buffer.subarray(got[1]);
    }
  }

  /** @returns {Promise<object[]>} the messages of the frames completed by `data` */
  async feed(data) {
    const out = [];
    for (const frame of this.push(data)) out.push((await parseFrame(frame, this.direction, this.limits)).message);
    return out;
  }

  close() {
    if (this.buffer.length) throw new WireError(1011, `stream ended inside a frame (${this.buffer.length} bytes)`);
  }
}

/** [kind, op, flags, requestId, body bytes] of a canonical JSON rendering. */
export function messageParts(msg) {
  if (msg === null || typeof msg !== "object" || !KIND_NAMES.includes(msg.kind)) {
    throw new JsonError("kind must be control, request, response or push");
  }
  const extra = Object.keys(msg).filter((k) => !["kind", "op", "requestId", "body", "error"].includes(k));
  if (extra.length) throw new JsonError(`unexpected members ${extra.join(", ")}`);
  const kind = KIND_NAMES.indexOf(msg.kind), op = msg.op, body = msg.body === undefined ? {} : msg.body;
  const smallNumber = (x) => typeof x === "number" && Number.isInteger(x) && x >= 0 && x < 64;
  let rid = null;
  if (kind === REQUEST || kind === RESPONSE) {
    rid = msg.requestId;
    if (typeof rid !== "number" || !Number.isInteger(rid) || rid < 1 || rid > MAX_U32) {
      throw new JsonError("requestId must be an integer in 1..4294967295");
    }
  }
  if (kind === CONTROL) {
    if (!has(CONTROLS_BY_NAME, op)) throw new JsonError(`unknown control op ${JSON.stringify(op)}`);
    const c = CONTROLS_BY_NAME[op];
    return [kind, c.op, 0, null, encodeFields(c.fields, body)];
  }
  if (kind === PUSH) {
    if (smallNumber(op) && !has(PUSHES, op)) return [kind, op, 0, null, new Uint8Array(0)];
    if (!has(PUSHES_BY_NAME, op)) throw new JsonError(`unknown push ${JSON.stringify(op)}`);
    const p = PUSHES_BY_NAME[op];
    return [kind, p.code, 0, null, encodeFields(p.fields, body)];
  }
  if (kind === RESPONSE && has(msg, "error")) {
    let number;
    if (has(OPS_BY_NAME, op)) number = OPS_BY_NAME[op].op;
    else if (smallNumber(op)) number = op;
    else throw new JsonError("op must be an op name or a number below 64");
    const error = msg.error;
    if (error === null || typeof error !== "object") throw new JsonError("error must be an object");
    const { name, ...fields } = error;                // the name is derived from the code
    return [kind, number, F_ERROR, rid, encodeFields(STRUCTS.ErrorBody, fields, "error")];
  }
  if (!has(OPS_BY_NAME, op)) throw new JsonError(`unknown op ${JSON.stringify(op)}`);
  const o = OPS_BY_NAME[op];
  return [kind, o.op, 0, rid, encodeFields(opFields(o, KIND_NAMES[kind]), body)];
}

/** Length || Flags || Type || [RequestId] || Body. */
export function buildFrame(flags, typeByte, requestId, body) {
  const header = [flags, typeByte];
  if (requestId !== null) putUvarint(header, requestId);
  const length = header.length + body.length;
  if (length > ABSOLUTE_MAX_FRAME) throw new RangeError(`frame of ${length} bytes does not fit a 4-byte length`);
  const prefix = putUvarint([], length);
  const out = new Uint8Array(prefix.length + length);
  out.set(prefix, 0);
  out.set(header, prefix.length);
  out.set(body, prefix.length + header.length);
  return out;
}

/** The frame of a canonical JSON rendering, never compressed. */
export function encodeSync(msg) {
  const [kind, op, flags, rid, body] = messageParts(msg);
  return buildFrame(flags, (kind << 6) | op, rid, body);
}

/**
 * The frame of a canonical JSON rendering. compress: false never; true always; "auto" as a sender does it (bodies
 * of at least `threshold` bytes, and only when that makes the body smaller, SPEC 4-6).
 * @param {object} msg
 * @param {{compress?: boolean | "auto", threshold?: number}} [options]
 * @returns {Promise<Uint8Array>}
 */
export async function encode(msg, { compress = false, threshold = 512 } = {}) {
  const [kind, op, flags, rid, body] = messageParts(msg);
  if (body.length > 0 && (compress === true || (compress === "auto" && body.length >= threshold))) {
    const packed = concat(uvarint(body.length), await deflate(body));
    if (compress === true || packed.length < body.length) return buildFrame(flags | F_COMPRESSED, (kind << 6) | op, rid, packed);
  }
  return buildFrame(flags, (kind << 6) | op, rid, body);
}

/** Lowercase hex of bytes, and back. */
export function toHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function fromHex(hex) {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.substr(2 * i, 2), 16);
  return out;
}
