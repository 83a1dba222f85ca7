// Channel broadcasts (broadcast, rewindBroadcasts, SPEC 13.11) through the JavaScript client against a live
// gateway: members get a channelBroadcast push and a non-member does not, the sender only with echo, a joiner
// rewinds the last ones, and the size and rewind limits answer their errors.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { Client, SwitchboardError } from "../src/index.js";
import { Gateway } from "../testlib/gateway.js";

const pause = (ms) => new Promise((r) => setTimeout(r, ms));

let open;
before(async () => { open = await new Gateway().start(); });
after(async () => { await open.remove(); });

test("members get a broadcast, a non-member does not, and a joiner rewinds the last ones", async () => {
  const sender = new Client(open.unix, { userId: "js-sender" });
  const member = new Client(open.unix, { userId: "js-member" });
  const outsider = new Client(open.unix, { userId: "js-outsider" });
  await Promise.all([sender.connect(), member.connect(), outsider.connect()]);
  const atMember = member.pushes("channelBroadcast");
  const atSender = sender.pushes("channelBroadcast");
  const atOutsider = outsider.pushes("channelBroadcast");
  await member.subscribeChannel({ channel: "js-doc", withPresence: false });
  await sender.subscribeChannel({ channel: "js-doc", withPresence: false });
  await outsider.subscribeChannel({ channel: "js-other", withPresence: false });

  const sent = await sender.broadcast({ channel: "js-doc", data: '{"cursor":[3,4]}' });
  assert.equal(sent.delivered, 1);
  const got = (await atMember.next(5000)).body;
  assert.equal(got.channel, "js-doc");
  assert.equal(got.sender, "js-sender");
  assert.equal(got.data, '{"cursor":[3,4]}');
  assert.equal(got.sequence, sent.sequence);
  const echoed = await sender.broadcast({ channel: "js-doc", data: "wave", echo: true });
  assert.equal((await atSender.next(5000)).body.data, "wave");
  assert.equal((await atMember.next(5000)).body.sequence, echoed.sequence);
  await pause(200);
  assert.equal(await atOutsider.next(100).then((p) => p, () => null), null, "a non-member got a broadcast");

  const joiner = new Client(open.unix, { userId: "js-joiner" });
  await joiner.connect();
  await joiner.subscribeChannel({ channel: "js-doc" });
  const rewound = await joiner.rewindBroadcasts({ channel: "js-doc", limit: 1 });
  assert.deepEqual(rewound.broadcasts.map((b) => b.data), ["wave"]);
  assert.equal(rewound.latestSequence, echoed.sequence);

  await assert.rejects(sender.broadcast({ channel: "js-doc", data: "x".repeat(4097) }),
    (e) => e instanceof SwitchboardError && e.code === 7015);
  await assert.rejects(joiner.rewindBroadcasts({ channel: "js-doc", limit: 101 }),
    (e) => e instanceof SwitchboardError && e.code === 7016);
  await assert.rejects(outsider.rewindBroadcasts({ channel: "js-doc" }),
    (e) => e instanceof SwitchboardError && e.code === 4004);
  for (const client of [sender, member, outsider, joiner]) await client.logout();
});
