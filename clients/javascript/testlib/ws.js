/** The `ws` package (Debian's node-ws): Node 20 has no global WebSocket. */
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

/** The `ws` package: from the usual module paths, else where Debian's node-ws installs it. */
export function loadWs() {
  try {
    return require("ws");
  } catch {
    return require("/usr/share/nodejs/ws");
  }
}
