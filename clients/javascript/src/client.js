/**
 * `Client`: a session that survives lost connections, with an async method for every operation (generated.js),
 * push streams, connection events, reconnect with backoff and subscriptions restored.
 */
import { Operations } from "./generated.js";
import { Connection, DEFAULT_MAX_FRAME, helloBody } from "./connection.js";
import { ClientClosed, GoAwayError, NotConnected, ProtocolViolation, RequestTimeout, ConnectionLost, ConnectFailed } from "./errors.js";
import { parseEndpoint } from "./transports.js";

export const VERSION = "0.1.0";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** A wait that does not keep Node running by itself. */
const idle = (ms) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  if (typeof timer.unref === "function") timer.unref();
});

/** Backoff between reconnect attempts: initialDelay (ms) doubling (multiplier) to maxDelay, +/- jitter (a fraction),
 * at most maxAttempts attempts in a row (Infinity: no limit; 0: never reconnect). */
export class ReconnectPolicy {
  constructor({ initialDelay = 1000, multiplier = 2, maxDelay = 30000, jitter = 0.2, maxAttempts = Infinity } = {}) {
    Object.assign(this, { initialDelay, multiplier, maxDelay, jitter, maxAttempts });
  }

  static never() {
    return new ReconnectPolicy({ maxAttempts: 0 });
  }

  /** The wait in ms before attempt `attempt` (1, 2, ...). */
  delay(attempt) {
    const base = Math.min(this.maxDelay, this.initialDelay * this.multiplier ** (attempt - 1));
    return Math.max(0, base * (1 + (Math.random() * 2 - 1) * this.jitter));
  }
}

/**
 * An async iterator over what the client receives from the moment it was made until the client closes. It
 * buffers up to `limit` unread elements and beyond that drops the oldest (`dropped` counts them).
 * `await stream.next(timeoutMs)` reads one element (RequestTimeout when none comes in time); `close()` ends it.
 */
export class Stream {
  constructor(owner, accepts, limit) {
    this.owner = owner;
    this.accepts = accepts;
    this.limit = limit;
    this.items = [];
    this.waiters = [];
    this.ended = false;
    this.dropped = 0;
  }

  offer(item) {
    if (this.ended || !this.accepts(item)) return;
    const waiter = this.waiters.shift();
    if (waiter) {
      waiter.resolve({ value: item, done: false });
      return;
    }
    if (this.items.length >= this.limit) {
      this.items.shift();
      this.dropped += 1;
    }
    this.items.push(item);
  }

  end() {
    this.ended = true;
    for (const w of this.waiters.splice(0)) w.resolve({ value: undefined, done: true });
  }

  /** Stops this stream (the client keeps running). */
  close() {
    this.end();
    this.owner.forget(this);
  }

  [Symbol.asyncIterator]() {
    return {
      next: () => {
        if (this.items.length) return Promise.resolve({ value: this.items.shift(), done: false });
        if (this.ended) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => this.waiters.push({ resolve }));
      },
      return: () => {
        this.close();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }

  /** The next element; RequestTimeout after `timeoutMs`, ClientClosed when the stream has ended. */
  async next(timeoutMs = Infinity) {
    if (this.items.length) return this.items.shift();
    if (this.ended) throw new ClientClosed("the stream ended");
    const result = await new Promise((resolve) => {
      const waiter = { resolve };
      this.waiters.push(waiter);
      if (timeoutMs !== Infinity) {
        const timer = setTimeout(() => {
          const i = this.waiters.indexOf(waiter);
          if (i >= 0) {
            this.waiters.splice(i, 1);
            resolve(null);
          }
        }, timeoutMs);
        if (typeof timer.unref === "function") timer.unref();
      }
    });
    if (result === null) throw new RequestTimeout(`nothing arrived within ${timeoutMs} ms`);
    if (result.done) throw new ClientClosed("the stream ended");
    return result.value;
  }
}

/** What the app subscribed to through the client, and its last will, so that a new session can make them again
 * (SPEC 13: subscriptions and wills belong to a session). Event subscriptions are kept by the server for the user. */
class Ledger {
  constructor() {
    this.channels = new Map();
    this.userMetadata = new Map();
    this.profileUsers = new Set();
    this.profileGroups = new Set();
    this.provider = null;
    this.changes = null;          // subscribeChanges, resuming after the last change seen
    this.will = null;             // setWill: the session's last will, registered again on a new session
    this.revisions = new Map();   // set → majorRevision of the last storage event received (SPEC SB-13.1-8)
    this.eventReplay = null;      // {epoch, position}: the last online-only event received (SPEC SB-13.4-9)
  }

  /** A position of the server's numbering of online-only events: in the same epoch the greater counts, another
   * epoch replaces it (epochs and positions are numbers, or BigInts beyond 2^53 - 1). */
  noteEventPosition(epoch, position) {
    if (!epoch) return;
    const current = this.eventReplay;
    if (current !== null && current.epoch === epoch) {
      if (position > current.position) current.position = position;
    } else {
      this.eventReplay = { epoch, position };
    }
  }

  /** A subscribedEvents push arrived: a new session asks for the online-only events after the last one. */
  noteEvents(events) {
    for (const event of events ?? []) if (event.epoch) this.noteEventPosition(event.epoch, event.position ?? 0);
  }

  /** A set's key as a storage event names it (enums by name, or by number: user 1, channel 2; message 1, stream 2). */
  static setKey(storageType, target, channelType) {
    const type = typeof channelType === "number" ? ["", "message", "stream"][channelType] : channelType ?? "message";
    const channel = storageType === "channel" || storageType === 2;
    return channel ? `c\u0000${type}\u0000${target}` : `u\u0000${target}`;
  }

  /** A storage event arrived: a new session's subscription to its set resumes from its majorRevision. */
  noteStorageEvent(event) {
    this.revisions.set(Ledger.setKey(event.storageType, event.target, event.channelType), event.majorRevision);
  }

  /** A change push arrived: a new session resumes the admin change stream after it. */
  noteChange(position) {
    if (this.changes !== null && position > (this.changes.resumeFrom ?? 0)) this.changes.resumeFrom = position;
  }

  record(op, body, response) {
    if (op === "subscribeEvent" && response) {
      this.noteEventPosition(response.epoch, response.position ?? 0);
      return;
    }
    if (op === "resumeEvents" && response) {
      // Same epoch without a gap: the replayed events follow and move the point on.
      if (response.epoch !== (body.epoch ?? 0) || response.gap) {
        this.eventReplay = null;
        this.noteEventPosition(response.epoch, response.position ?? 0);
      }
      return;
    }
    if (op === "subscribeChanges" && response) {
      const seen = this.changes !== null && this.changes.resumeEpoch === response.epoch ? this.changes.resumeFrom ?? 0 : 0;
      const changes = { ...body };
      if ((body.resumeEpoch ?? 0) === response.epoch && !response.gap) {
        changes.resumeFrom = Math.max(body.resumeFrom ?? 0, seen);   // the replay follows and moves it on
      } else {
        changes.resumeFrom = Math.max(response.position, seen);
      }
      changes.resumeEpoch = response.epoch;
      this.changes = changes;
      return;
    }
    if (op === "unsubscribeChanges") {
      this.changes = null;
      return;
    }
    if (op === "setWill") {
      this.will = body.actions && body.actions.length ? { ...body } : null;
      return;
    }
    const channelKey = `${body.channelType ?? "message"}\u0000${body.channel ?? ""}`;
    if (op === "subscribeChannel") this.channels.set(channelKey, { ...body, sinceRevision: 0 });
    else if (op === "unsubscribeChannel") {
      this.channels.delete(channelKey);
      this.revisions.delete(Ledger.setKey("channel", body.channel ?? "", body.channelType));
    } else if (op === "subscribeUserMetadata") this.userMetadata.set(body.userId ?? "", { ...body, sinceRevision: 0 });
    else if (op === "unsubscribeUserMetadata") this.userMetadata.delete(body.userId ?? "");
    else if (op === "subscribeProfiles") {
      for (const u of body.userIds ?? []) this.profileUsers.add(u);
      for (const g of body.groupIds ?? []) this.profileGroups.add(g);
    } else if (op === "unsubscribeProfiles") {
      for (const u of body.userIds ?? []) this.profileUsers.delete(u);
      for (const g of body.groupIds ?? []) this.profileGroups.delete(g);
    } else if (op === "registerProvider") {
      this.provider = body.kinds && body.kinds.length ? { ...body } : null;
    }
  }

  /** The requests that make every recorded subscription again, in order; metadata subscriptions resume from the
   * last storage event received of their set (ownUserId names the set of a subscription to the caller's own). */
  requests(ownUserId = "") {
    const since = (key) => this.revisions.get(key) ?? 0;
    const out = [...this.channels.values()].map((b) => [
      "subscribeChannel", b.withMetadata ? { ...b, sinceRevision: since(Ledger.setKey("channel", b.channel ?? "", b.channelType)) } : b,
    ]);
    out.push(...[...this.userMetadata.values()].map((b) => [
      "subscribeUserMetadata", { ...b, sinceRevision: since(Ledger.setKey("user", b.userId || ownUserId)) },
    ]));
    if (this.profileUsers.size || this.profileGroups.size) {
      out.push(["subscribeProfiles", { userIds: [...this.profileUsers].sort(), groupIds: [...this.profileGroups].sort() }]);
    }
    if (this.provider !== null) out.push(["registerProvider", this.provider]);
    if (this.changes !== null) out.push(["subscribeChanges", { ...this.changes }]);
    if (this.will !== null) out.push(["setWill", { ...this.will }]);
    return out;
  }

  /** Stops tracking a subscription the new session refused. */
  drop(op, body) {
    const undo = { subscribeChannel: "unsubscribeChannel", subscribeUserMetadata: "unsubscribeUserMetadata", subscribeProfiles: "unsubscribeProfiles" };
    if (undo[op]) this.record(undo[op], body);
    else if (op === "registerProvider") this.provider = null;
    else if (op === "subscribeChanges") this.changes = null;
    else if (op === "setWill") this.will = null;
  }
}

const FATAL_GOAWAY_CLASSES = [2, 7];    // auth and HELLO fields: another attempt would be refused the same way

/**
 * A Switchboard session: `const client = new Client("127.0.0.1:7400", {userId: "tony"}); await client.connect();`
 *
 * endpoint: "host:port", "tcp://host:port", "unix:PATH", "ws://host:port/path", "wss://..." or {host, port} /
 * {path} / {url}. Options: userId (open development mode; with a token: empty or the token's user), token or
 * tokenProvider (an async function asked for a token for each new session and for renewals), deviceId,
 * clientType, clientName, requestTimeout and connectTimeout (ms), heartbeatMs, compression, maxFrameSize,
 * reconnect (a ReconnectPolicy or its options), waitWhileDisconnected, streamBufferLimit, WebSocket (the
 * constructor for ws:// endpoints where there is no global one), tls (TCP: true or node:tls options).
 */
export class Client extends Operations {
  constructor(endpoint, options = {}) {
    super();
    this.endpoint = parseEndpoint(endpoint);
    this.userId = options.userId ?? "";
    this.token = options.token ?? "";
    this.tokenProvider = options.tokenProvider ?? null;
    this.deviceId = options.deviceId ?? "";
    this.clientType = options.clientType;
    this.clientName = options.clientName ?? `switchboard-js/${VERSION}`;
    this.requestTimeout = options.requestTimeout ?? 10000;
    this.connectTimeout = options.connectTimeout ?? 5000;
    this.heartbeatMs = options.heartbeatMs ?? 0;
    this.compression = options.compression ?? true;
    this.maxFrameSize = options.maxFrameSize ?? DEFAULT_MAX_FRAME;
    this.reconnectPolicy = options.reconnect instanceof ReconnectPolicy ? options.reconnect : new ReconnectPolicy(options.reconnect);
    this.waitWhileDisconnected = options.waitWhileDisconnected ?? true;
    this.streamBufferLimit = options.streamBufferLimit ?? 10000;
    this.WebSocket = options.WebSocket;
    this.tls = options.tls ?? null;
    /** idle, connecting, connected, reconnecting, closed */
    this.state = "idle";
    this.closeReason = null;
    this.connection = null;
    this.ledger = new Ledger();
    this.pushStreams = [];
    this.eventStreams = [];
    this.listeners = { push: new Set(), connection: new Set() };
    this.readyWaiters = [];
    this.closedWaiters = [];
    this.totals = { framesSent: 0, framesReceived: 0, compressedFramesSent: 0, compressedFramesReceived: 0, pingsSent: 0 };
  }

  // ---------------------------------------------------------------------------------------------- lifecycle

  /** Makes the first session and resolves to its WELCOME; rejects with its error (ConnectFailed, GoAwayError...). */
  async connect() {
    if (this.state === "closed") throw new ClientClosed();
    if (this.connection !== null && this.connection.usable) return this.connection.welcome;
    this.state = "connecting";
    let connection;
    try {
      connection = await this.open();
    } catch (e) {
      this.state = "idle";
      throw e;
    }
    this.adopt(connection);
    this.emit({ kind: "connected", welcome: connection.welcome });
    return connection.welcome;
  }

  /** The current session's WELCOME (null before the first session). */
  get welcome() {
    return this.connection ? this.connection.welcome : null;
  }

  /** Frames sent and received over every connection of this client so far. */
  get stats() {
    const total = { ...this.totals };
    if (this.connection && !this.connection.isClosed) for (const [k, v] of Object.entries(this.connection.stats)) total[k] += v;
    return total;
  }

  /** Ends the session normally (others see the user leave at once) and closes the client; waits up to `timeout` ms
   * (default 5000) for the server's GOAWAY and EOF. */
  async logout({ timeout = 5000 } = {}) {
    const connection = this.connection;
    this.finish(null);
    if (connection !== null && connection.usable) {
      try {
        await connection.logout(timeout);
      } catch {
        connection.close();
      }
    }
  }

  /** Drops the connection without logging out (presence keeps the user for its timeout); the client ends. */
  async close() {
    const connection = this.connection;
    this.finish(null);
    if (connection !== null) connection.close();
  }

  /** Resolves when the client has ended (close, logout, a fatal refusal, reconnect attempts used up). */
  closed() {
    if (this.state === "closed") return Promise.resolve(this.closeReason);
    return new Promise((resolve) => this.closedWaiters.push(resolve));
  }

  // ---------------------------------------------------------------------------------------------- calls

  /** Sends any request by op name with a JSON body (camelCase fields, SPEC 10) and resolves to the response body with
   * every field present. Waits for a session while reconnecting (up to the timeout, ms). */
  async call(op, body = {}, { timeout } = {}) {
    const limit = timeout ?? this.requestTimeout;
    const deadline = Date.now() + limit;
    if (op === "logout") {
      await this.logout();
      return {};
    }
    for (;;) {
      if (this.state === "closed") {
        throw new ClientClosed(`${op}: the client is closed${this.closeReason ? ` (${this.closeReason.message})` : ""}`);
      }
      const connection = this.connection;
      if (this.state !== "connected" || connection === null || !connection.usable) {
        if (!this.waitWhileDisconnected || this.state === "idle") throw new NotConnected(`${op}: not connected to ${this.endpoint.text}`);
        const remaining = deadline - Date.now();
        if (remaining <= 0) throw new RequestTimeout(`${op}: no session with ${this.endpoint.text} within ${limit} ms`);
        // After a GOAWAY the connection stays open until EOF: wait for it to end, then for the next session.
        const waiting = connection !== null && this.state === "connected" ? connection.closed() : this.whenReady();
        await Promise.race([waiting, idle(remaining)]);
        continue;
      }
      const response = await connection.request(op, body, Math.max(0, deadline - Date.now()));
      this.ledger.record(op, body, response);
      return response;
    }
  }

  whenReady() {
    return new Promise((resolve) => this.readyWaiters.push(resolve));
  }

  /** Round trip of a PING on the current connection, in ms. */
  ping(timeoutMs = 5000) {
    if (this.connection === null || !this.connection.usable) return Promise.reject(new NotConnected(`not connected to ${this.endpoint.text}`));
    return this.connection.ping(timeoutMs);
  }

  // ---------------------------------------------------------------------------------------------- streams

  /** A stream of the pushes ({kind, body, compressed}) of these kinds (all kinds when none is named) that arrive
   * from now on, over whichever connection is current. Make it before the request whose pushes it should see. */
  pushes(...kinds) {
    const wanted = new Set(kinds);
    const stream = new Stream(this, (p) => wanted.size === 0 || wanted.has(p.kind), this.streamBufferLimit);
    if (this.state === "closed") stream.end();
    else this.pushStreams.push(stream);
    return stream;
  }

  /** A stream of connection events from now on ({kind: "connected" | "disconnected" | "reconnecting" | "restored"
   * | "tokenRenewed" | "tokenRenewalFailed", ...}); it ends after the client's last `disconnected`. */
  connectionEvents() {
    const stream = new Stream(this, () => true, this.streamBufferLimit);
    if (this.state === "closed") stream.end();
    else this.eventStreams.push(stream);
    return stream;
  }

  /** Where the client stands in the server's numbering of online-only events ({epoch, position} or null). */
  get eventReplayPosition() {
    const point = this.ledger.eventReplay;
    return point === null ? null : { ...point };
  }

  /** Calls listener(push) for every push ("push") or listener(event) for every connection event ("connection");
   * returns a function that removes it. */
  on(what, listener) {
    this.listeners[what].add(listener);
    return () => this.listeners[what].delete(listener);
  }

  forget(stream) {
    this.pushStreams = this.pushStreams.filter((s) => s !== stream);
    this.eventStreams = this.eventStreams.filter((s) => s !== stream);
  }

  onPush(push) {
    if (push.kind === "change") this.ledger.noteChange(push.body.position);
    if (push.kind === "storageEvent") this.ledger.noteStorageEvent(push.body);
    if (push.kind === "subscribedEvents") this.ledger.noteEvents(push.body.events);
    for (const stream of this.pushStreams) stream.offer(push);
    for (const listener of this.listeners.push) listener(push);
    if (push.kind === "serverNotice" && push.body.code === 2002 && this.tokenProvider) this.renew();
  }

  async renew() {
    try {
      await this.renewToken({ token: await this.tokenProvider() });
    } catch (error) {             // the session goes on with its token; the server ends it at expiry
      this.emit({ kind: "tokenRenewalFailed", error });
      return;
    }
    this.emit({ kind: "tokenRenewed" });
  }

  emit(event) {
    for (const stream of this.eventStreams) stream.offer(event);
    for (const listener of this.listeners.connection) listener(event);
  }

  // ---------------------------------------------------------------------------------------------- sessions

  async open() {
    const token = this.tokenProvider ? await this.tokenProvider() : this.token;
    const hello = helloBody({
      userId: this.userId, token, deviceId: this.deviceId, clientName: this.clientName, clientType: this.clientType,
      heartbeatMs: this.heartbeatMs, compression: this.compression, maxFrameSize: this.maxFrameSize,
    });
    return Connection.open(this.endpoint, hello, {
      connectTimeout: this.connectTimeout, maxFrameSize: this.maxFrameSize, WebSocket: this.WebSocket, tls: this.tls,
      onPush: (push) => this.onPush(push),
      onClose: (connection, reason) => this.onClose(connection, reason),
    });
  }

  adopt(connection) {
    this.connection = connection;
    this.state = "connected";
    for (const resolve of this.readyWaiters.splice(0)) resolve();
  }

  onClose(connection, reason) {
    if (connection !== this.connection) return;
    for (const [k, v] of Object.entries(connection.stats)) this.totals[k] += v;
    if (this.state !== "connected") return;
    this.supervise(reason ?? new ConnectionLost(8004, "the connection ended"));
  }

  /** The client ends: no more sessions; streams end after a last `disconnected`. */
  finish(reason) {
    if (this.state === "closed") return;
    this.state = "closed";
    this.closeReason = reason;
    this.emit({ kind: "disconnected", error: reason, willReconnect: false });
    for (const stream of [...this.pushStreams, ...this.eventStreams]) stream.end();
    this.pushStreams = [];
    this.eventStreams = [];
    for (const resolve of this.readyWaiters.splice(0)) resolve();
    for (const resolve of this.closedWaiters.splice(0)) resolve(reason);
  }

  /** Refusals another attempt would meet again: auth errors, 1008 unsupportedVersion, HELLO fields (7xxx). */
  static fatal(error) {
    return error instanceof GoAwayError && (FATAL_GOAWAY_CLASSES.includes(Math.floor(error.code / 1000)) || error.code === 1008);
  }

  /** The current connection ended: reconnect with backoff and restore subscriptions, or end the client. */
  async supervise(reason) {
    if (reason instanceof GoAwayError && reason.code === 0) {
      this.finish(null);                          // the session ended normally (logout elsewhere)
      return;
    }
    const willReconnect = this.reconnectPolicy.maxAttempts !== 0 && !(reason instanceof ProtocolViolation);
    if (!willReconnect) {
      this.finish(reason);
      return;
    }
    this.state = "reconnecting";
    this.emit({ kind: "disconnected", error: reason, willReconnect: true });
    let cause = reason;
    for (let attempt = 1; this.state !== "closed"; attempt++) {
      if (attempt > this.reconnectPolicy.maxAttempts) {
        this.finish(cause);
        return;
      }
      const delay = this.reconnectPolicy.delay(attempt);
      this.emit({ kind: "reconnecting", error: cause, attempt, delay });
      await sleep(delay);
      if (this.state === "closed") return;
      let connection;
      try {
        connection = await this.open();
      } catch (e) {
        if (Client.fatal(e)) {
          this.finish(e);
          return;
        }
        cause = e;
        continue;
      }
      if (this.state === "closed") {            // closed while this attempt was under way
        connection.close();
        return;
      }
      const { restored, failed, changeStream, events } = await this.restore(connection);
      if (connection.isClosed) {
        cause = connection.closeReason ?? cause;
        continue;
      }
      if (this.state === "closed") {
        connection.close();
        return;
      }
      this.adopt(connection);
      this.emit({ kind: "connected", welcome: connection.welcome });
      this.emit({ kind: "restored", restored, failed, changeStream, events });
      return;
    }
  }

  async restore(connection) {
    const restored = [], failed = [];
    let changeStream = null;      // the resumed admin change stream's answer: its gap says to re-read state
    for (const [op, body] of this.ledger.requests(connection.welcome?.userId || this.userId)) {
      try {
        const response = await connection.request(op, body, this.requestTimeout);
        restored.push([op, body]);
        if (op === "subscribeChanges") {
          changeStream = response;
          this.ledger.record(op, body, response);
        }
      } catch (e) {
        if (e instanceof ConnectionLost || e instanceof NotConnected || e instanceof RequestTimeout || e instanceof ConnectFailed) break;
        failed.push([op, body, e]);
        this.ledger.drop(op, body);
      }
    }
    // The online-only events missed meanwhile (SPEC SB-13.4-9), once the subscriptions are back; null when the
    // client has no position yet or the request failed.
    let events = null;
    const point = this.ledger.eventReplay;
    if (point !== null && !connection.isClosed) {
      const body = { epoch: point.epoch, after: point.position };
      try {
        events = await connection.request("resumeEvents", body, this.requestTimeout);
        this.ledger.record("resumeEvents", body, events);
      } catch (e) {
        events = null;
      }
    }
    return { restored, failed, changeStream, events };
  }
}

/**
 * An app's copy of one metadata set kept from its storage events (SPEC SB-13.1-7, SB-13.1-8): a whole snapshot
 * replaces it; a resumed one (resumedFrom > 0) removes its removedKeys, then overwrites or appends its items; set
 * and update overwrite or append; remove and expired delete the keys, or empty the copy when they name none (the
 * whole set was removed or expired, SB-13.1-9, SB-13.1-10). `majorRevision` is what to resume from, `expiresAtMs`
 * when the whole set expires (0: no TTL).
 */
export class MetadataSetCopy {
  constructor() {
    this.majorRevision = 0;
    this.items = [];
    this.expiresAtMs = 0;
  }

  /** Applies a storageEvent push body of this set. */
  apply(event) {
    const type = { snapshot: 1, set: 2, update: 3, remove: 4, expired: 5 }[event.eventType] ?? event.eventType ?? 1;
    const write = (items) => {
      for (const item of items) {
        const at = this.items.findIndex((x) => x.key === item.key);
        if (at >= 0) this.items[at] = item;
        else this.items.push(item);
      }
    };
    if (type === 1 && (event.resumedFrom ?? 0) > 0) {
      const removed = new Set(event.removedKeys ?? []);
      this.items = this.items.filter((x) => !removed.has(x.key));
      write(event.items ?? []);
    } else if (type === 1) {
      this.items = [...(event.items ?? [])];
    } else if (type === 2 || type === 3) {
      write(event.items ?? []);
    } else if (type === 4 || type === 5) {
      const removed = new Set((event.items ?? []).map((x) => x.key));
      this.items = removed.size === 0 ? [] : this.items.filter((x) => !removed.has(x.key));
    } else {
      return;                                   // a kind this client does not know
    }
    this.majorRevision = event.majorRevision ?? 0;
    this.expiresAtMs = event.expiresAtMs ?? 0;
  }
}
