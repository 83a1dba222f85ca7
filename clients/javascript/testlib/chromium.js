/**
 * Headless Chromium (Debian's `chromium`) driven over its DevTools protocol, with the `ws` package's WebSocket, and
 * a small HTTP server that serves the client's sources and the test page.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { loadWs } from "./ws.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const PACKAGE = join(HERE, "..");

/** Serves /src/* from the package and /page.html from testlib/browser. */
export async function serveFiles() {
  const server = createServer((request, response) => {
    const path = new URL(request.url, "http://x").pathname;
    const file = path === "/page.html" ? join(HERE, "browser", "page.html") : normalize(join(PACKAGE, path));
    if (!(path === "/page.html" || (path.startsWith("/src/") && file.startsWith(join(PACKAGE, "src"))))) {
      response.writeHead(404).end();
      return;
    }
    try {
      const body = readFileSync(file);
      response.writeHead(200, { "content-type": file.endsWith(".html") ? "text/html" : "text/javascript" }).end(body);
    } catch {
      response.writeHead(404).end();
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

export class Chromium {
  async start() {
    this.profile = mkdtempSync(join(tmpdir(), "sbchrome"));
    this.process = spawn(process.env.CHROMIUM || "chromium", ["--headless=new", "--no-sandbox", "--disable-gpu",
      "--no-first-run", "--remote-debugging-port=0", `--user-data-dir=${this.profile}`, "about:blank"],
    // Its own process group, so that stop() can end the browser's helper processes (zygote, renderers, crashpad)
    // too: they outlive the main process for a moment and keep writing into the profile directory.
    { stdio: ["ignore", "ignore", "pipe"], detached: true });
    this.exited = new Promise((resolve) => this.process.once("exit", resolve));
    const endpoint = await new Promise((resolve, reject) => {
      let text = "";
      const timer = setTimeout(() => reject(new Error(`chromium did not start within 30 s:\n${text}`)), 30000);
      this.process.once("error", (e) => { clearTimeout(timer); reject(e); });
      this.process.stderr.on("data", (chunk) => {
        text += chunk;
        const m = /DevTools listening on (ws:\S+)/.exec(text);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
    });
    const WebSocket = loadWs();
    this.socket = new WebSocket(endpoint, { perMessageDeflate: false });
    await new Promise((resolve, reject) => { this.socket.once("open", resolve); this.socket.once("error", reject); });
    this.nextId = 0;
    this.waiting = new Map();
    this.socket.on("message", (data) => {
      const message = JSON.parse(data.toString());
      const waiter = this.waiting.get(message.id);
      if (waiter) {
        this.waiting.delete(message.id);
        if (message.error) waiter.reject(new Error(JSON.stringify(message.error)));
        else waiter.resolve(message.result);
      }
    });
    return this;
  }

  /**
   * Sends a DevTools command and awaits its result, failing with the command's name after `timeoutMs` rather than
   * waiting for the test's own timeout (which would not say which step hung).
   */
  send(method, params = {}, sessionId, { timeoutMs = 20000 } = {}) {
    const id = ++this.nextId;
    this.socket.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        const what = params.expression ? ` of ${JSON.stringify(params.expression).slice(0, 200)}` : "";
        reject(new Error(`chromium did not answer ${method}${what} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiting.set(id, {
        resolve: (value) => { clearTimeout(timer); resolve(value); },
        reject: (error) => { clearTimeout(timer); reject(error); },
      });
    });
  }

  /** Opens a page and returns a function that evaluates an expression in it (awaiting promises). */
  async open(url) {
    const { targetId } = await this.send("Target.createTarget", { url });
    const { sessionId } = await this.send("Target.attachToTarget", { targetId, flatten: true });
    return async (expression) => {
      const result = await this.send("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true }, sessionId);
      if (result.exceptionDetails) throw new Error(`in the page: ${JSON.stringify(result.exceptionDetails).slice(0, 500)}`);
      return result.result.value;
    };
  }

  /**
   * Ends the browser and every process of its group: SIGTERM, then SIGKILL if the browser has not exited within
   * 5 s (a headless Chromium can hang in its shutdown), and removes its profile directory.
   */
  async stop() {
    this.socket?.terminate();
    if (this.process) {
      const group = (signal) => {
        try { process.kill(-this.process.pid, signal); } catch { /* the group has already gone */ }
      };
      if (this.process.exitCode === null && this.process.signalCode === null) {
        group("SIGTERM");
        const ended = await Promise.race([this.exited.then(() => true), pause(5000).then(() => false)]);
        if (!ended) {
          group("SIGKILL");
          await this.exited;
        }
      }
      group("SIGKILL");   // helpers that outlived the browser
    }
    if (this.profile) removeDirectory(this.profile);
  }
}

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Removes `path`; a helper process ending late may still add a file, so a few tries, then only a warning. */
function removeDirectory(path) {
  for (let attempt = 1; ; attempt++) {
    try {
      rmSync(path, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
      return;
    } catch (error) {
      if (attempt >= 5) {
        console.warn(`could not remove the chromium profile ${path}: ${error.message}`);
        return;
      }
    }
  }
}
