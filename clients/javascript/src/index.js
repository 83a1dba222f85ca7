/**
 * The Switchboard client for JavaScript (browsers and Node 20+): an ES module without dependencies.
 *
 *   import { Client } from "switchboard-client";
 *   const client = new Client("127.0.0.1:7400", { userId: "tony" });   // or "ws://host:port/path", "unix:PATH"
 *   await client.connect();
 *   await client.setUserMetadata({ items: [{ key: "status", value: "online" }] });
 */
export { Client, MetadataSetCopy, ReconnectPolicy, Stream, VERSION } from "./client.js";
export { Connection, helloBody } from "./connection.js";
export {
  SwitchboardError, ServerError, GoAwayError, RequestTimeout, ConnectionLost, NotConnected, ConnectFailed,
  UnexpectedResponse, ProtocolViolation, ClientClosed,
} from "./errors.js";
export { ErrorCode, ERROR_CLASSES, PUSH_NAMES, Operations } from "./generated.js";
export { SUBPROTOCOL, parseEndpoint, openNet, openWebSocket } from "./transports.js";
export * as wire from "./wire.js";
