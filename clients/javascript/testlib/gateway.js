/**
 * A live gateway for the tests: the real `switchboard` binary on a free loopback port and a temporary Unix socket, in
 * open development mode or with a token secret, stopped (and its files removed) afterwards.
 *
 * The binary is $SWITCHBOARD_BINARY, else the repository's .build/debug/switchboard. A missing binary fails the tests:
 * they never skip.
 */
import { spawn, execFileSync } from "node:child_process";
import { accessSync, constants, existsSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, closeSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const SECRET = "javascript-client-tests-secret-0123456789abcdef";

export function binary() {
  const path = process.env.SWITCHBOARD_BINARY || join(REPO, ".build", "debug", "switchboard");
  try {
    accessSync(path, constants.X_OK);
  } catch {
    throw new Error(`no switchboard binary at ${path}: build it (swift build --product switchboard) or set SWITCHBOARD_BINARY`);
  }
  return path;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

const pause = (ms) => new Promise((r) => setTimeout(r, ms));

/** Whether a listener accepts connections at {host, port} or {path} (a socket file exists before it listens). */
function canConnect(options) {
  return new Promise((resolve) => {
    const socket = connect(options);
    socket.once("connect", () => { socket.destroy(); resolve(true); });
    socket.once("error", () => resolve(false));
  });
}

/** One gateway process: start(), stop() (SIGTERM: GOAWAY 8002 to every session), restart() on the same ports, socket
 * and database, token(user) minted by `switchboard token` with the gateway's secret. With `websocket: true` it also
 * listens for WebSocket connections (`websocketUrl`), upgrading browsers of `origins` only (a list, or "*"). */
export class Gateway {
  constructor({ secret = null, extra = [], websocket = false, origins = [] } = {}) {
    this.binary = binary();
    this.secret = secret;
    this.extra = extra;
    this.websocket = websocket;
    this.origins = origins;
    this.websocketPort = 0;
    this.dir = mkdtempSync(join(tmpdir(), "sbjs"));         // short: a Unix socket path is at most 107 bytes
    this.socket = join(this.dir, "gw.sock");
    this.database = join(this.dir, "gw.sqlite");
    this.logPath = join(this.dir, "gw.log");
    this.port = 0;
    this.process = null;
  }

  get tcp() {
    return `127.0.0.1:${this.port}`;
  }

  get unix() {
    return `unix:${this.socket}`;
  }

  endpoint(transport) {
    return transport === "unix" ? this.unix : this.tcp;
  }

  /** The WebSocket listener's URL (a path other than the default `/`, as deployments use). */
  get websocketUrl() {
    return `ws://127.0.0.1:${this.websocketPort}/switchboard`;
  }

  async start() {
    if (!this.port) this.port = await freePort();
    const args = ["--tcp", this.tcp, "--unix-socket", this.socket, "--database", this.database,
      "--shutdown-grace-ms", "300", "--log-level", "info", ...this.extra];
    if (this.secret !== null) args.push("--token-secret", this.secret);
    if (this.websocket) {
      if (!this.websocketPort) this.websocketPort = await freePort();
      args.push("--websocket", `127.0.0.1:${this.websocketPort}`, "--websocket-path", "/switchboard");
      const origins = this.origins === "*" ? "*" : this.origins.join(",");
      if (origins) args.push("--websocket-origins", origins);
    }
    const log = openSync(this.logPath, "a");
    const child = spawn(this.binary, args, { stdio: ["ignore", log, log], cwd: this.dir });
    closeSync(log);
    this.process = child;
    let exited = null;
    child.once("exit", (code) => { exited = code; });
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
      if (exited !== null) throw new Error(`the gateway exited with ${exited}:\n${this.log()}`);
      if (existsSync(this.socket) && (await canConnect({ path: this.socket }))
        && (await canConnect({ host: "127.0.0.1", port: this.port }))
        && (!this.websocket || (await canConnect({ host: "127.0.0.1", port: this.websocketPort })))) return this;
      await pause(50);
    }
    await this.stop();
    throw new Error(`the gateway did not listen within 30 s:\n${this.log()}`);
  }

  async stop() {
    const child = this.process;
    this.process = null;
    if (child === null || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 15000);
    await exited;
    clearTimeout(timer);
  }

  async restart() {
    await this.stop();
    await this.start();
  }

  /** SIGSTOP, and waits until every thread of the process has stopped: the gateway then reads and answers nothing
   * (its sockets stay open) until resume(). */
  async pause() {
    this.process.kill("SIGSTOP");
    const tasks = `/proc/${this.process.pid}/task`;
    for (let i = 0; i < 500; i++) {
      const states = readdirSync(tasks).map((id) => {
        try {
          return readFileSync(`${tasks}/${id}/stat`, "utf8").replace(/^.*\) /s, "")[0];
        } catch {
          return "T";
        }
      });
      if (states.every((s) => s === "T" || s === "t")) return;
      await pause(10);
    }
    throw new Error("the gateway did not stop within 5 s of SIGSTOP");
  }

  resume() {
    this.process.kill("SIGCONT");
  }

  token(user, { admin = false, ttl = "1h" } = {}) {
    if (this.secret === null) throw new Error("open development mode has no tokens");
    const args = ["token", "--token-secret", this.secret, "--user", user, "--ttl", ttl];
    if (admin) args.push("--admin");
    return execFileSync(this.binary, args, { encoding: "utf8", timeout: 30000 }).trim();
  }

  log() {
    try {
      return readFileSync(this.logPath, "utf8").slice(-4000);
    } catch {
      return "";
    }
  }

  async remove() {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
