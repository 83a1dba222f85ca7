/**
 * One connection to the gateway: the handshake, requests matched to responses by id, the in-flight limit,
 * heartbeats, pushes, GOAWAY. `Client` makes one per session and a new one after each reconnect.
 */
import * as wire from "./wire.js";
import {
  ConnectFailed, ConnectionLost, GoAwayError, NotConnected, ProtocolViolation, RequestTimeout, ServerError,
  SwitchboardError, UnexpectedResponse,
} from "./errors.js";
import { openTransport } from "./transports.js";

export const DEFAULT_MAX_FRAME = 1048576;
export const CLOSING_READ_TIMEOUT = 5000;       // how long to read towards EOF after GOAWAY or logout (SB-5.8-7)

const now = () => (typeof performance !== "undefined" ? performance.now() : Date.now());

function unref(timer) {
  if (timer && typeof timer.unref === "function") timer.unref();
  return timer;
}

/** A counting semaphore: the request slots of the in-flight limit (WELCOME.maxInflight). */
class Slots {
  constructor(count) {
    this.free = count;
    this.waiters = [];
  }

  acquire(timeoutMs) {
    if (this.free > 0) {
      this.free -= 1;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const waiter = { resolve, timer: null };
      waiter.timer = unref(setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        resolve(false);
      }, timeoutMs));
      this.waiters.push(waiter);
    });
  }

  release() {
    const waiter = this.waiters.shift();
    if (waiter) {
      clearTimeout(waiter.timer);
      waiter.resolve(true);
    } else {
      this.free += 1;
    }
  }
}

/** The HELLO of a session (SPEC 7): version 1, zlib when wanted, and a grease feature name (SB-5.2-2). */
export function helloBody({ userId = "", token = "", deviceId = "", clientName = "", clientType, heartbeatMs = 0,
  compression = true, maxFrameSize = DEFAULT_MAX_FRAME }) {
  const grease = `grease.${Math.floor(Math.random() * 65536).toString(16).padStart(4, "0")}`;
  const body = { protocolVersion: 1, features: compression ? ["zlib", grease] : [grease], clientName };
  if (token) body.token = token;
  if (userId) body.userId = userId;
  if (deviceId) body.deviceId = deviceId;
  if (clientType !== undefined) body.clientType = clientType;
  if (heartbeatMs) body.heartbeatMs = heartbeatMs;
  if (maxFrameSize !== DEFAULT_MAX_FRAME) body.maxFrameSize = maxFrameSize;
  return body;
}

/** A session on one connection. Make it with `await Connection.open(endpoint, hello, options)`. */
export class Connection {
  constructor(endpoint, transport, options) {
    this.endpoint = endpoint;
    this.transport = transport;
    this.options = options;
    this.welcome = null;
    this.goaway = null;
    this.closeReason = null;
    this.isClosed = false;
    this.stats = { framesSent: 0, framesReceived: 0, compressedFramesSent: 0, compressedFramesReceived: 0, pingsSent: 0 };
    this.maxFrameSize = options.maxFrameSize ?? DEFAULT_MAX_FRAME;
    this.limits = new wire.Limits(this.maxFrameSize, this.maxFrameSize, false);
    this.decoder = new wire.StreamDecoder("s2c", this.limits);
    this.pending = new Map();
    this.nextId = 0;
    this.slots = new Slots(128);
    this.zlib = false;
    this.threshold = 512;
    this.lastSent = this.lastReceived = now();
    this.pingNonce = 0;
    this.pongs = new Map();
    this.closing = false;                           // GOAWAY received or logout sent: no new requests
    this.chain = Promise.resolve();                 // incoming bytes are processed in order
    this.heartbeat = null;
    this.closingTimer = null;
    this.closedPromise = new Promise((resolve) => { this.resolveClosed = resolve; });
    this.handshake = null;
  }

  /** Connects, sends HELLO and reads WELCOME (or the GOAWAY refusing the session, thrown as GoAwayError). */
  static async open(endpoint, hello, options) {
    const timeout = options.connectTimeout ?? 5000;
    const transport = await openTransport(endpoint, { connectTimeout: timeout, WebSocket: options.WebSocket, tls: options.tls });
    const connection = new Connection(endpoint, transport, options);
    transport.ondata = (bytes) => {
      connection.chain = connection.chain.then(() => connection.receive(bytes));
    };
    transport.onclose = (error) => {
      connection.chain = connection.chain.then(() => connection.ended(error));
    };
    const welcome = new Promise((resolve, reject) => { connection.handshake = { resolve, reject }; });
    const timer = setTimeout(() => connection.handshake?.reject(
      new ConnectFailed(`${endpoint.text} did not answer HELLO within ${timeout} ms`)), timeout);
    connection.write(wire.encodeSync({ kind: "control", op: "hello", body: hello }));
    try {
      await welcome;
    } catch (e) {
      connection.close(e);
      throw e;
    } finally {
      clearTimeout(timer);
    }
    return connection;
  }

  ready(welcome) {
    this.welcome = welcome;
    this.zlib = welcome.features.includes("zlib");
    this.limits = new wire.Limits(this.maxFrameSize, this.maxFrameSize, this.zlib);
    this.decoder.limits = this.limits;
    this.threshold = welcome.compressThreshold || 512;
    this.slots = new Slots(welcome.maxInflight || 128);
    const interval = welcome.heartbeatMs || 15000;
    const deadAfter = interval * (welcome.heartbeatMisses || 3);
    this.heartbeat = unref(setInterval(() => this.beat(interval, deadAfter), Math.min(interval / 4, 1000)));
  }

  /** PING when nothing was sent for half the interval (SB-5.6-1); silence for heartbeatMs x heartbeatMisses is a
   * dead connection (SB-5.6-4). */
  beat(interval, deadAfter) {
    const t = now();
    if (t - this.lastReceived > deadAfter) {
      this.close(new ConnectionLost(1009, `nothing from ${this.endpoint.text} for ${Math.round(t - this.lastReceived)} ms`));
      return;
    }
    if (t - this.lastSent >= interval / 2) {
      this.pingNonce += 1;
      this.stats.pingsSent += 1;
      this.sendControl("ping", { nonce: this.pingNonce });
    }
  }

  // ---------------------------------------------------------------------------------------------- requests

  /** True while new requests may be sent (no GOAWAY, no logout, not closed). */
  get usable() {
    return !this.closing && !this.isClosed;
  }

  /** A promise that resolves when the connection has closed. */
  closed() {
    return this.closedPromise;
  }

  /** Sends a request and resolves to its response body (every field present), or rejects with a SwitchboardError. */
  async request(op, body, timeoutMs) {
    if (!this.usable) throw new NotConnected(`the connection to ${this.endpoint.text} is closing`);
    const deadline = now() + timeoutMs;
    if (!(await this.slots.acquire(timeoutMs))) {
      throw new RequestTimeout(`${op}: no free request slot within ${timeoutMs} ms (${this.pending.size} in flight)`);
    }
    if (!this.usable) {
      this.slots.release();
      throw new NotConnected(`the connection to ${this.endpoint.text} is closing`);
    }
    const requestId = this.takeId();
    let frame;
    try {
      frame = await wire.encode({ kind: "request", op, requestId, body },
        { compress: this.zlib && op !== "renewToken" ? "auto" : false, threshold: this.threshold });
    } catch (e) {
      this.slots.release();
      throw e;
    }
    if (!this.usable) {
      this.slots.release();
      throw new NotConnected(`the connection to ${this.endpoint.text} is closing`);
    }
    return new Promise((resolve, reject) => {
      const pending = { op, resolve, reject, abandoned: false, timer: null };
      this.pending.set(requestId, pending);
      pending.timer = unref(setTimeout(() => {
        pending.abandoned = true;                   // the id stays in flight until its answer (SB-2.4-4)
        reject(new RequestTimeout(`${op}: no answer within ${timeoutMs} ms`));
      }, Math.max(0, deadline - now())));
      this.write(frame);
    });
  }

  takeId() {
    for (;;) {                                      // counts up from 1, wraps, skips ids in flight (SB-2.4-3)
      this.nextId = this.nextId < wire.MAX_U32 ? this.nextId + 1 : 1;
      if (!this.pending.has(this.nextId)) return this.nextId;
    }
  }

  /** Sends PING and resolves to the round trip in milliseconds. */
  ping(timeoutMs = 5000) {
    this.pingNonce += 1;
    const nonce = this.pingNonce, started = now();
    return new Promise((resolve, reject) => {
      const timer = unref(setTimeout(() => {
        this.pongs.delete(nonce);
        reject(new RequestTimeout(`no PONG within ${timeoutMs} ms`));
      }, timeoutMs));
      this.pongs.set(nonce, { resolve: () => { clearTimeout(timer); resolve(now() - started); }, reject });
      this.sendControl("ping", { nonce });
    });
  }

  /** Ends the session normally: `logout`, then reads up to the server's GOAWAY and EOF (SB-5.7, SB-5.8-7). */
  async logout(timeoutMs = CLOSING_READ_TIMEOUT) {
    try {
      await this.request("logout", {}, timeoutMs);
    } finally {
      this.closing = true;
    }
    const timer = new Promise((resolve) => unref(setTimeout(resolve, timeoutMs, "timeout")));
    if ((await Promise.race([this.closedPromise, timer])) === "timeout") {
      this.close(new ConnectionLost(8004, `no EOF within ${timeoutMs} ms after logout`));
    }
  }

  /** Closes the transport now (no logout: presence keeps the user for its timeout). Requests in flight fail. */
  close(reason = null) {
    if (this.isClosed) return;
    this.isClosed = true;
    this.closing = true;
    this.closeReason = reason;
    clearInterval(this.heartbeat);
    clearTimeout(this.closingTimer);
    this.transport.close();
    if (this.handshake) {
      this.handshake.reject(reason ?? new ConnectFailed(`${this.endpoint.text} closed the connection before WELCOME`));
      this.handshake = null;
    }
    const pending = this.pending;
    this.pending = new Map();
    for (const p of pending.values()) {
      this.slots.release();
      clearTimeout(p.timer);
      if (!p.abandoned) {
        const code = reason && reason.code ? reason.code : 8004;
        p.reject(new ConnectionLost(code, `${p.op}: the connection closed before the answer (${reason ? reason.detail : "closed"})`));
      }
    }
    for (const pong of this.pongs.values()) pong.reject(new ConnectionLost(8004, "the connection closed"));
    this.pongs.clear();
    this.resolveClosed(reason);
    this.options.onClose?.(this, reason);
  }

  // ---------------------------------------------------------------------------------------------- writing

  write(frame) {
    this.transport.send(frame);
    this.lastSent = now();
    this.stats.framesSent += 1;
    const length = wire.peekVarint(frame, 0, 4);
    if (frame[length[1]] & wire.F_COMPRESSED) this.stats.compressedFramesSent += 1;
  }

  sendControl(op, body) {
    if (!this.isClosed) this.write(wire.encodeSync({ kind: "control", op, body }));
  }

  // ---------------------------------------------------------------------------------------------- reading

  async receive(bytes) {
    if (this.isClosed) return;
    try {
      for (const data of this.decoder.push(bytes)) {
        await this.frame(data);
        if (this.isClosed) return;
      }
    } catch (e) {
      if (!(e instanceof wire.WireError)) throw e;
      this.sendControl("goAway", { code: e.code, message: e.detail });
      this.close(new ProtocolViolation(e.code, e.detail));
    }
  }

  async frame(data) {
    const frame = wire.parseHeader(data, "s2c", this.limits);
    this.lastReceived = now();
    this.stats.framesReceived += 1;
    const compressed = (frame.flags & wire.F_COMPRESSED) !== 0;
    if (compressed) this.stats.compressedFramesReceived += 1;
    const body = await wire.frameBody(frame, this.limits);
    let message;
    try {
      message = wire.frameToMessage(frame, body);
    } catch (e) {
      if (e instanceof wire.WireError && e.requestId !== null && !e.fatal) {
        this.fail(e.requestId, new ProtocolViolation(e.code, e.detail));
        return;
      }
      throw e;
    }
    this.dispatch(message, compressed);
  }

  dispatch(message, compressed) {
    const { kind, op } = message;
    if (this.welcome === null) {                    // the handshake: WELCOME or the GOAWAY refusing the session
      const handshake = this.handshake;
      this.handshake = null;
      if (kind === "control" && op === "welcome") {
        this.ready(wire.withDefaults(wire.CONTROLS_BY_NAME.welcome.fields, message.body));
        handshake?.resolve(this.welcome);
        return;
      }
      const error = kind === "control" && op === "goAway"
        ? goAwayError(wire.withDefaults(wire.CONTROLS_BY_NAME.goAway.fields, message.body))
        : new ProtocolViolation(1007, "the first frame from the server is not WELCOME");
      if (kind === "control" && op === "goAway") this.goaway = wire.withDefaults(wire.CONTROLS_BY_NAME.goAway.fields, message.body);
      handshake?.reject(error);
      this.close(error);
      return;
    }
    if (kind === "response") {
      this.answer(message);
    } else if (kind === "push") {
      if (typeof op === "string") {                  // an unknown push code arrives as a number: ignored (SB-2.3-4)
        const body = wire.withDefaults(wire.PUSHES_BY_NAME[op].fields, message.body);
        this.options.onPush?.({ kind: op, body, compressed });
      }
    } else if (op === "ping") {
      this.sendControl("pong", { nonce: message.body.nonce ?? 0 });
    } else if (op === "pong") {
      const waiter = this.pongs.get(message.body.nonce ?? 0);
      if (waiter) {
        this.pongs.delete(message.body.nonce ?? 0);
        waiter.resolve();
      }
    } else if (op === "goAway") {
      this.goAway(wire.withDefaults(wire.CONTROLS_BY_NAME.goAway.fields, message.body));
    } else {
      throw new wire.WireError(1004, `the server sent ${op} while Ready`);
    }
  }

  answer(message) {
    const pending = this.pending.get(message.requestId);
    if (pending === undefined) return;              // not in flight: ignored
    this.pending.delete(message.requestId);
    this.slots.release();
    clearTimeout(pending.timer);
    if (pending.abandoned) return;
    if (message.op !== pending.op) {
      pending.reject(new UnexpectedResponse(`${pending.op} was answered with a response of ${message.op}`));
    } else if (message.error) {
      const body = wire.withDefaults(wire.STRUCTS.ErrorBody, message.error);
      pending.reject(new ServerError(body.code, body.message, body));
    } else {
      pending.resolve(wire.withDefaults(wire.opFields(wire.OPS_BY_NAME[pending.op], "response"), message.body));
    }
  }

  fail(requestId, error) {
    const pending = this.pending.get(requestId);
    if (pending === undefined) return;
    this.pending.delete(requestId);
    this.slots.release();
    clearTimeout(pending.timer);
    if (!pending.abandoned) pending.reject(error);
  }

  /** No new requests; requests the server never read fail now, the others wait for their answers or EOF. */
  goAway(body) {
    this.goaway = body;
    this.closing = true;
    const error = goAwayError(body);
    for (const id of [...this.pending.keys()]) if (id > body.lastRequestId) this.fail(id, error);
    this.closingTimer = unref(setTimeout(() => this.close(
      new ConnectionLost(8004, `no EOF within ${CLOSING_READ_TIMEOUT} ms after GOAWAY`)), CLOSING_READ_TIMEOUT));
  }

  ended(error) {
    if (this.isClosed) return;
    try {
      this.decoder.close();
    } catch (e) {
      this.close(new ProtocolViolation(e.code, e.detail));
      return;
    }
    if (this.goaway !== null) this.close(goAwayError(this.goaway));
    else this.close(new ConnectionLost(8004, `the connection to ${this.endpoint.text} ended without GOAWAY${error ? ` (${error.message})` : ""}`));
  }
}

function goAwayError(body) {
  return new GoAwayError(body.code, body.message, { reason: body.reason, lastRequestId: body.lastRequestId });
}

export { SwitchboardError };
