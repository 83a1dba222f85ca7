// Declarations of the client's public API (hand-written; the schema's types are in generated.d.ts, generated).
import { Operations } from "./generated.js";
import type { CallOptions, GoAway as GoAwayBody, PushBodies, PushKind, MetadataItem, StorageEvent, ResumeEventsResponse, SubscribeChangesResponse, Welcome } from "./generated.js";

export * from "./generated.js";

/** "host:port", "tcp://host:port", "unix:PATH", "ws://host:port/path", "wss://...", or an object form. */
export type Endpoint = string | { host: string; port: number } | { path: string } | { url: string };

/** A WebSocket constructor with the browser's API (the `ws` package's in Node 20). */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => any;

export interface ReconnectOptions {
  /** ms before the first attempt (default 1000). */
  initialDelay?: number;
  /** Growth per attempt (default 2). */
  multiplier?: number;
  /** ms, the longest wait (default 30000). */
  maxDelay?: number;
  /** +/- this fraction of the delay (default 0.2). */
  jitter?: number;
  /** Attempts in a row before the client ends (default Infinity; 0: never reconnect). */
  maxAttempts?: number;
}

export declare class ReconnectPolicy implements Required<ReconnectOptions> {
  constructor(options?: ReconnectOptions);
  static never(): ReconnectPolicy;
  initialDelay: number;
  multiplier: number;
  maxDelay: number;
  jitter: number;
  maxAttempts: number;
  /** The wait in ms before attempt `attempt` (1, 2, ...). */
  delay(attempt: number): number;
}

export interface ClientOptions {
  /** The user in open development mode (with a token: empty or the token's user). */
  userId?: string;
  token?: string;
  /** Asked for a token for every new session and for renewals. */
  tokenProvider?: () => Promise<string>;
  deviceId?: string;
  clientType?: string | number;
  clientName?: string;
  /** ms per request (default 10000). */
  requestTimeout?: number;
  /** ms to connect and get WELCOME (default 5000). */
  connectTimeout?: number;
  heartbeatMs?: number;
  /** Offer zlib (default true). */
  compression?: boolean;
  maxFrameSize?: number;
  reconnect?: ReconnectPolicy | ReconnectOptions;
  /** Calls wait for the next session while the client reconnects (default true). */
  waitWhileDisconnected?: boolean;
  /** Unread elements a stream keeps before it drops the oldest (default 10000). */
  streamBufferLimit?: number;
  /** The constructor for ws:// and wss:// endpoints (default: globalThis.WebSocket). */
  WebSocket?: WebSocketConstructor | null;
  /** TCP endpoints in Node: true or node:tls connect options. */
  tls?: boolean | object | null;
}

/** A push: its kind, its body with every field present, and whether its frame arrived compressed. */
export type Push<K extends PushKind = PushKind> = K extends PushKind ? { kind: K; body: PushBodies[K]; compressed: boolean } : never;

export type ConnectionEvent =
  | { kind: "connected"; welcome: Welcome }
  | { kind: "disconnected"; error: SwitchboardError | null; willReconnect: boolean }
  | { kind: "reconnecting"; error: SwitchboardError; attempt: number; delay: number }
  | {
      kind: "restored";
      restored: Array<[string, object]>;
      failed: Array<[string, object, SwitchboardError]>;
      /** The resumed admin change stream's answer (subscribeChanges), or null: its gap says to re-read state. */
      changeStream: SubscribeChangesResponse | null;
      /** The answer of the resume of online-only events (resumeEvents, SPEC SB-13.4-9), or null when the client
       * had no position yet (or the request failed): the replayed events follow; gap says some may be missing. */
      events: ResumeEventsResponse | null;
    }
  | { kind: "tokenRenewed" }
  | { kind: "tokenRenewalFailed"; error: SwitchboardError };

/** An app's copy of one metadata set kept from its storage events, resumed snapshots included (SPEC SB-13.1-8). */
export declare class MetadataSetCopy {
  /** The set's majorRevision as of the last event applied: what to resume from (sinceRevision). */
  majorRevision: number;
  /** The items, in the order the events gave them. */
  items: MetadataItem[];
  /** When the whole set expires, in ms since the Unix epoch, as of the last event applied (0: no TTL; SB-13.1-10). */
  expiresAtMs: number;
  /** Applies a storageEvent push body of this set. */
  apply(event: StorageEvent): void;
}

export declare class Stream<T> implements AsyncIterable<T> {
  /** Elements dropped because the consumer fell behind by more than the limit. */
  dropped: number;
  /** The next element; RequestTimeout after `timeoutMs`, ClientClosed when the stream ended. */
  next(timeoutMs?: number): Promise<T>;
  close(): void;
  [Symbol.asyncIterator](): AsyncIterator<T>;
}

export interface Stats {
  framesSent: number;
  framesReceived: number;
  compressedFramesSent: number;
  compressedFramesReceived: number;
  pingsSent: number;
}

export declare class Connection {
  readonly welcome: Welcome | null;
  /** The GOAWAY the server sent, every field present (null when none came). */
  readonly goaway: GoAwayBody | null;
  readonly closeReason: SwitchboardError | null;
  readonly isClosed: boolean;
  readonly usable: boolean;
  readonly stats: Stats;
  closed(): Promise<SwitchboardError | null>;
  request(op: string, body: object, timeoutMs: number): Promise<any>;
  ping(timeoutMs?: number): Promise<number>;
  logout(timeoutMs?: number): Promise<void>;
  close(reason?: SwitchboardError | null): void;
}

export declare class Client extends Operations {
  constructor(endpoint: Endpoint, options?: ClientOptions);
  /** idle, connecting, connected, reconnecting, closed */
  readonly state: "idle" | "connecting" | "connected" | "reconnecting" | "closed";
  readonly closeReason: SwitchboardError | null;
  /** The current connection (a new one after each reconnect). */
  readonly connection: Connection | null;
  readonly welcome: Welcome | null;
  readonly stats: Stats;
  connect(): Promise<Welcome>;
  logout(options?: { timeout?: number }): Promise<void>;
  close(): Promise<void>;
  closed(): Promise<SwitchboardError | null>;
  call(op: string, body?: object, options?: CallOptions): Promise<any>;
  ping(timeoutMs?: number): Promise<number>;
  pushes<K extends PushKind>(...kinds: K[]): Stream<Push<K>>;
  connectionEvents(): Stream<ConnectionEvent>;
  /** Where the client stands in the server's numbering of online-only events: the epoch and the greatest position
   * received (from the events and the subscribeEvent answers), or null; a reconnect resumes from it (SPEC SB-13.4-9). */
  readonly eventReplayPosition: { epoch: number | bigint; position: number | bigint } | null;
  on(what: "push", listener: (push: Push) => void): () => void;
  on(what: "connection", listener: (event: ConnectionEvent) => void): () => void;
}

export declare const VERSION: string;
export declare const SUBPROTOCOL: "switchboard.v1";

export type ErrorKind = "server" | "goAway" | "timedOut" | "connectionLost" | "notConnected" | "connectFailed"
  | "unexpectedResponse" | "protocolViolation" | "clientClosed";

export declare class SwitchboardError extends Error {
  readonly kind: ErrorKind;
  /** The spec's error code (SPEC 9). */
  readonly code: number;
  readonly detail: string;
  /** The ErrorBody of an error response (code, message, currentRevision, key, retryAfterMs...). */
  readonly body: { code: number; message: string; [field: string]: unknown };
  readonly codeName: string;
  readonly errorClass: string;
  readonly retryAfterMs: number;
}
export declare class ServerError extends SwitchboardError {}
export declare class GoAwayError extends SwitchboardError {
  readonly reason: string | number;
  readonly lastRequestId: number;
}
export declare class RequestTimeout extends SwitchboardError {}
export declare class ConnectionLost extends SwitchboardError {}
export declare class NotConnected extends SwitchboardError {}
export declare class ConnectFailed extends SwitchboardError {}
export declare class UnexpectedResponse extends SwitchboardError {}
export declare class ProtocolViolation extends SwitchboardError {}
export declare class ClientClosed extends SwitchboardError {}

export declare function parseEndpoint(value: Endpoint): object;
export declare function helloBody(options: object): object;
export declare function openNet(endpoint: object, options?: object): Promise<object>;
export declare function openWebSocket(endpoint: object, options?: object): Promise<object>;
export declare const wire: any;
