/**
 * Byte transports under a connection. Each carries the protocol's frames both ways and reports what arrives:
 *
 *   transport.send(bytes)         queue one frame (or several) for sending
 *   transport.drained()           a promise that resolves when the send buffer has room again
 *   transport.close()             close now
 *   transport.ondata = (bytes) => {}      bytes in arrival order (any split: the decoder reassembles frames)
 *   transport.onclose = (error) => {}     the transport ended (error: null on an orderly end)
 *
 * openNet: TCP or a Unix domain socket through node:net (Node only, imported on first use).
 * openWebSocket: binary WebSocket messages with subprotocol `switchboard.v1` (a browser's WebSocket, or any
 * constructor with the same API, such as the `ws` package's, passed as an option).
 */
import { ConnectFailed } from "./errors.js";

export const SUBPROTOCOL = "switchboard.v1";
const HIGH_WATER = 1 << 20;

/** Where the gateway listens: {tcp: {host, port}} | {unix: path} | {url: "ws://..."}. */
export function parseEndpoint(value) {
  if (typeof value === "object" && value !== null) {
    if (value.path !== undefined) return { unix: value.path, text: `unix:${value.path}` };
    if (value.url !== undefined) return { url: value.url, text: value.url };
    return { tcp: { host: value.host, port: Number(value.port) }, text: `${value.host}:${value.port}` };
  }
  if (typeof value !== "string") throw new TypeError("an endpoint is host:port, tcp://host:port, unix:PATH or ws(s)://...");
  if (value.startsWith("ws://") || value.startsWith("wss://")) return { url: value, text: value };
  if (value.startsWith("unix:")) {
    const path = value.slice(5);
    return { unix: path.startsWith("//") ? path.slice(2) : path, text: value };
  }
  const text = value.startsWith("tcp://") ? value.slice(6) : value;
  const at = text.lastIndexOf(":");
  const port = text.slice(at + 1);
  if (at < 0 || !/^\d+$/.test(port)) throw new TypeError(`endpoint ${JSON.stringify(value)} is not host:port, tcp://host:port, unix:PATH or ws(s)://...`);
  return { tcp: { host: text.slice(0, at).replace(/^\[|\]$/g, ""), port: Number(port) }, text: `${text}` };
}

/** Opens a TCP or Unix-socket connection (Node). */
export async function openNet(endpoint, { connectTimeout = 5000, tls = null } = {}) {
  const net = await import("node:net");
  const secure = tls ? await import("node:tls") : null;
  return new Promise((resolve, reject) => {
    const options = endpoint.unix !== undefined ? { path: endpoint.unix } : { host: endpoint.tcp.host, port: endpoint.tcp.port };
    const socket = secure ? secure.connect({ ...options, ...(tls === true ? {} : tls) }) : net.connect(options);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new ConnectFailed(`cannot connect to ${endpoint.text}: no answer within ${connectTimeout} ms`));
    }, connectTimeout);
    socket.once(secure ? "secureConnect" : "connect", () => {
      clearTimeout(timer);
      socket.removeAllListeners("error");
      socket.setNoDelay?.(true);
      const transport = {
        kind: endpoint.unix !== undefined ? "unix" : "tcp",
        ondata: () => {},
        onclose: () => {},
        send(bytes) {
          if (!socket.destroyed) socket.write(bytes);
        },
        drained() {
          return socket.writableNeedDrain && !socket.destroyed ? new Promise((r) => {
            socket.once("drain", r);
            socket.once("close", r);
          }) : Promise.resolve();
        },
        close() {
          socket.destroy();
        },
      };
      let failure = null;
      socket.on("data", (chunk) => transport.ondata(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length)));
      socket.on("error", (e) => { failure = e; });
      socket.on("close", () => transport.onclose(failure));
      resolve(transport);
    });
    socket.once("error", (e) => {
      clearTimeout(timer);
      const why = e.code === "ENOENT" ? "no such socket file: is the gateway running?"
        : e.code === "ECONNREFUSED" ? "connection refused: is the gateway running?" : e.message;
      reject(new ConnectFailed(`cannot connect to ${endpoint.text}: ${why}`));
    });
  });
}

/** Opens a WebSocket connection: `WebSocket` is the constructor (default: globalThis.WebSocket). */
export function openWebSocket(endpoint, { connectTimeout = 5000, WebSocket = globalThis.WebSocket, protocols } = {}) {
  if (typeof WebSocket !== "function") {
    return Promise.reject(new ConnectFailed("no WebSocket here: pass the constructor as the WebSocket option (in Node 20: the ws package)"));
  }
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(endpoint.url, protocols ?? SUBPROTOCOL);
    ws.binaryType = "arraybuffer";
    let opened = false;
    const timer = setTimeout(() => {
      ws.close();
      reject(new ConnectFailed(`cannot connect to ${endpoint.text}: no answer within ${connectTimeout} ms`));
    }, connectTimeout);
    const transport = {
      kind: "websocket",
      /** The subprotocol the server chose ("switchboard.v1", or "" when the client offered none). */
      get protocol() {
        return ws.protocol;
      },
      ondata: () => {},
      onclose: () => {},
      send(bytes) {
        if (ws.readyState === 1) ws.send(bytes);
      },
      async drained() {
        while (ws.readyState === 1 && ws.bufferedAmount > HIGH_WATER) await new Promise((r) => setTimeout(r, 10));
      },
      close() {
        if (ws.readyState <= 1) ws.close();
      },
    };
    ws.onopen = () => {
      opened = true;
      clearTimeout(timer);
      resolve(transport);
    };
    ws.onmessage = (event) => {
      const data = event.data;
      if (typeof data === "string") return;                  // text messages are not part of the protocol
      transport.ondata(data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    };
    ws.onerror = () => {};
    ws.onclose = (event) => {
      clearTimeout(timer);
      if (!opened) reject(new ConnectFailed(`cannot connect to ${endpoint.text}: WebSocket closed (${event.code})`));
      else transport.onclose(null);
    };
  });
}

/** The transport an endpoint needs. */
export function openTransport(endpoint, options) {
  return endpoint.url !== undefined ? openWebSocket(endpoint, options) : openNet(endpoint, options);
}
