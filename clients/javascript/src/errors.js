/**
 * The errors the client raises: every one a SwitchboardError carrying the spec's error code (SPEC 9), with a `kind`
 * that says where it came from (as the Swift and Python clients' kinds do).
 */
import { ERROR_CLASSES, SCHEMA } from "./generated.js";

const NAMES = Object.fromEntries(SCHEMA.errors.map((e) => [e.code, e.name]));

/** An error with the spec's error code. kind: server (an error response: `body` is its ErrorBody), goAway (the
 * server refused or ended the session), timedOut (8003), connectionLost, notConnected, connectFailed,
 * unexpectedResponse (8000), protocolViolation (the decoder's 1xxx code), clientClosed (8004). */
export class SwitchboardError extends Error {
  constructor(code, message = "", { body = null, kind = "server" } = {}) {
    const name = NAMES[code] ?? "unknown";
    super(message ? `${name}(${code}): ${message}` : `${name}(${code})`);
    this.name = "SwitchboardError";
    this.kind = kind;
    this.code = code;
    this.detail = message;
    this.body = body ?? { code, message };
  }

  /** The code's name in the spec (`lockHeld`), or "unknown" for a code this version does not know. */
  get codeName() {
    return NAMES[this.code] ?? "unknown";
  }

  /** The code's class by its thousands digit: protocol, auth, limits, notFound, casConflict, lock,
   * invalidArgument or server. */
  get errorClass() {
    return ERROR_CLASSES[Math.floor(this.code / 1000)] ?? "unknown";
  }

  /** The server's advice for 3xxx and 8xxx errors: wait at least this long before retrying (0: none). */
  get retryAfterMs() {
    return Number(this.body.retryAfterMs ?? 0);
  }
}

/** The server answered the request with an error response; `body` is its ErrorBody (currentRevision, key...). */
export class ServerError extends SwitchboardError {
  constructor(code, message, body) {
    super(code, message, { body, kind: "server" });
  }
}

/** The server sent GOAWAY: it refused the session (auth, version, HELLO fields) or ended the connection. */
export class GoAwayError extends SwitchboardError {
  constructor(code, message, { reason = "protocolError", lastRequestId = 0 } = {}) {
    super(code, message, { kind: "goAway" });
    this.reason = reason;
    this.lastRequestId = lastRequestId;
  }
}

/** No answer in time (code 8003). A request that was sent may still have taken effect. */
export class RequestTimeout extends SwitchboardError {
  constructor(message) {
    super(8003, message, { kind: "timedOut" });
  }
}

/** The connection closed while the request was in flight: its outcome is unknown (8004, or the GOAWAY's code). */
export class ConnectionLost extends SwitchboardError {
  constructor(code, message) {
    super(code, message, { kind: "connectionLost" });
  }
}

/** The request was never sent: there was no usable connection (8004). It is safe to retry. */
export class NotConnected extends SwitchboardError {
  constructor(message) {
    super(8004, message, { kind: "notConnected" });
  }
}

/** Connecting failed below the protocol: refused, unreachable, no such socket file, timed out (8004). */
export class ConnectFailed extends SwitchboardError {
  constructor(message) {
    super(8004, message, { kind: "connectFailed" });
  }
}

/** The server answered with a response this client cannot match to its request (8000). */
export class UnexpectedResponse extends SwitchboardError {
  constructor(message) {
    super(8000, message, { kind: "unexpectedResponse" });
  }
}

/** The server sent bytes this client cannot read (the decoder's 1xxx code); the connection was closed. */
export class ProtocolViolation extends SwitchboardError {
  constructor(code, message) {
    super(code, message, { kind: "protocolViolation" });
  }
}

/** The client was closed (close, logout, a fatal refusal, or reconnect attempts used up) (8004). */
export class ClientClosed extends SwitchboardError {
  constructor(message = "the client is closed") {
    super(8004, message, { kind: "clientClosed" });
  }
}
