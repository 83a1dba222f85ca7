// Compiled by test/types.test.js with tsc --strict: the declarations describe the API as the docs use it.
import { Client, ReconnectPolicy, ServerError, ErrorCode, SwitchboardError, type Push } from "../../src/index.js";
async function main(): Promise<void> {
  const client = new Client("127.0.0.1:7400", { userId: "tony", reconnect: new ReconnectPolicy({ initialDelay: 100 }) });
  const welcome = await client.connect();
  const n: number | bigint = welcome.maxInflight;
  const r = await client.setUserMetadata({ items: [{ key: "a", value: "b" }] }, { timeout: 1000 });
  const rev = r.majorRevision;
  const stream = client.pushes("storageEvent", "lockEvent");
  for await (const push of stream) {
    if (push.kind === "storageEvent") { const t: string = push.body.target; }
    if (push.kind === "lockEvent") { const c: string = push.body.channel; }
  }
  try { await client.getLocks({ channel: "x" }); } catch (e) { if (e instanceof ServerError && e.code === ErrorCode.lockHeld) { const k: string = e.kind; } }
  client.on("connection", (event) => { if (event.kind === "reconnecting") { const d: number = event.delay; } });
  await client.logout();
}
main();
export function wrong(client: Client): void {
  // @ts-expect-error: a field the request does not have
  void client.setUserMetadata({ itemz: [] });
  // @ts-expect-error: the response has no such field
  void client.getLocks({ channel: "x" }).then((r) => r.lockz);
  // @ts-expect-error: not a push kind
  client.pushes("storageEvents");
}
