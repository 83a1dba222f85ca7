/**
 * A WebSocket-to-TCP relay for the tests, built on Debian's `node-ws` package: it accepts WebSocket connections
 * that ask for the subprotocol `switchboard.v1`, opens a TCP connection to the gateway for each, and carries the
 * protocol's frames both ways, one whole frame per binary message as the gateway's own WebSocket listener does. It
 * checks that every message a client sends holds whole frames only, and records what it saw.
 */
import { createRequire } from "node:module";
import { connect } from "node:net";
import * as wire from "../src/wire.js";

const require = createRequire(import.meta.url);

/** The `ws` package: from the usual module paths, else where Debian's node-ws installs it. */
export function loadWs() {
  try {
    return require("ws");
  } catch {
    return require("/usr/share/nodejs/ws");
  }
}

export class Relay {
  constructor(gatewayPort) {
    this.gatewayPort = gatewayPort;
    this.ws = loadWs();
    this.protocols = [];            // the subprotocol lists clients asked for
    this.badMessages = [];          // client messages that were not whole frames
    this.messagesFromClients = 0;
    this.sockets = new Set();
  }

  async start() {
    this.server = new this.ws.WebSocketServer({
      host: "127.0.0.1", port: 0, path: "/switchboard",
      handleProtocols: (protocols) => (protocols.has("switchboard.v1") ? "switchboard.v1" : false),
    });
    await new Promise((resolve) => this.server.once("listening", resolve));
    this.server.on("connection", (socket, request) => this.relay(socket, request));
    return this;
  }

  get url() {
    return `ws://127.0.0.1:${this.server.address().port}/switchboard`;
  }

  relay(socket, request) {
    this.protocols.push(request.headers["sec-websocket-protocol"]);
    const tcp = connect({ host: "127.0.0.1", port: this.gatewayPort });
    this.sockets.add(socket);
    let buffer = new Uint8Array(0);
    const queued = [];
    tcp.once("connect", () => { for (const m of queued.splice(0)) tcp.write(m); });
    socket.on("message", (data, isBinary) => {
      this.messagesFromClients += 1;
      const bytes = new Uint8Array(data);
      if (!isBinary || !wholeFrames(bytes)) this.badMessages.push(wire.toHex(bytes).slice(0, 80));
      if (tcp.connecting) queued.push(bytes);
      else tcp.write(bytes);
    });
    tcp.on("data", (chunk) => {
      const joined = new Uint8Array(buffer.length + chunk.length);
      joined.set(buffer, 0);
      joined.set(chunk, buffer.length);
      buffer = joined;
      for (;;) {
        const got = wire.splitFrame(buffer, new wire.Limits(wire.ABSOLUTE_MAX_FRAME));
        if (got === null) break;
        socket.send(buffer.slice(0, got[1]), { binary: true });
        buffer = buffer.subarray(got[1]);
      }
    });
    const end = () => {
      this.sockets.delete(socket);
      tcp.destroy();
      socket.terminate();
    };
    tcp.on("close", end);
    tcp.on("error", end);
    socket.on("close", end);
    socket.on("error", end);
  }

  /** Drops every relayed connection at once (as a network failure would). */
  dropAll() {
    for (const socket of this.sockets) socket.terminate();
  }

  async stop() {
    this.dropAll();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

function wholeFrames(bytes) {
  let rest = bytes;
  while (rest.length) {
    const got = wire.splitFrame(rest, new wire.Limits(wire.ABSOLUTE_MAX_FRAME));
    if (got === null) return false;
    rest = rest.subarray(got[1]);
  }
  return true;
}
