/// The inspector's page (`GET /inspector`): one self-contained HTML document, its style and script inline, no other
/// resource loaded, no build step. It polls `/inspector/api/…` about once a second (as RabbitMQ's management UI does:
/// no long-lived stream, which the metrics endpoint's idle timeout and one-answer-at-a-time rule would cut) and
/// redraws, setting everything it shows as text (`textContent`), never as HTML. The admin token comes from the
/// URL fragment (`#token=…`, never sent to a server, dropped from the address bar at once) or the form, and is kept
/// in `sessionStorage` (gone with the tab).
enum InspectorPage {
    /// The page's bytes, as served.
    static let bytes = Array(html.utf8)

    static let html = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Switchboard inspector</title>
<style>
  :root { color-scheme: light dark; --line: #8884; --muted: #888; --accent: #2a7ae2; --flash: #fd04; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.4 system-ui, sans-serif; }
  header { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: center; padding: .6rem 1rem;
           border-bottom: 1px solid var(--line); }
  h1 { font-size: 1.1rem; margin: 0; }
  h2 { font-size: 1rem; margin: 0 0 .4rem; }
  h3 { font-size: .9rem; margin: .8rem 0 .3rem; color: var(--muted); }
  main { display: grid; grid-template-columns: repeat(auto-fit, minmax(26rem, 1fr)); gap: 1rem; padding: 1rem; }
  section { border: 1px solid var(--line); border-radius: 6px; padding: .7rem; min-width: 0; }
  table { width: 100%; border-collapse: collapse; }
  th, td { text-align: left; padding: .2rem .4rem; border-bottom: 1px solid var(--line); vertical-align: top;
           overflow-wrap: anywhere; }
  th { font-weight: 600; color: var(--muted); white-space: nowrap; }
  td.key { white-space: nowrap; }
  td.number { text-align: right; font-variant-numeric: tabular-nums; }
  tbody tr.pick { cursor: pointer; }
  tbody tr.pick:hover, tbody tr.selected { background: #2a7ae222; }
  .value { font-family: ui-monospace, monospace; white-space: pre-wrap; }
  .changed { animation: flash 1.5s ease-out; }
  @keyframes flash { from { background: var(--flash); } to { background: transparent; } }
  .controls { display: flex; flex-wrap: wrap; gap: .4rem; margin: .3rem 0; }
  .muted, .empty { color: var(--muted); }
  #status.error { color: #d33; }
  input, select, button { font: inherit; }
</style>
</head>
<body>
<header>
  <h1>Switchboard inspector</h1>
  <form id="login" class="controls">
    <input id="token" type="password" placeholder="admin token" autocomplete="off" size="28">
    <button type="submit">Use token</button>
    <button type="button" id="forget">Forget token</button>
  </form>
  <span id="status" role="status">starting</span>
</header>
<main>
  <section id="channels-panel">
    <h2>Channels</h2>
    <div class="controls">
      <input id="channel-prefix" placeholder="name prefix" size="14">
      <select id="channel-type"><option value="">all types</option><option>message</option><option>stream</option></select>
      <button type="button" id="channels-first">First page</button>
      <button type="button" id="channels-next" disabled>Next page</button>
    </div>
    <table id="channels">
      <thead><tr><th>channel</th><th>type</th><th>users</th><th>sessions</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>

  <section id="channel-panel">
    <h2>Channel <span id="channel-name" class="value"></span></h2>
    <p id="channel-summary" class="muted">Pick a channel.</p>
    <h3>Members and their state</h3>
    <table id="members">
      <thead><tr><th>user</th><th>state</th></tr></thead>
      <tbody></tbody>
    </table>
    <div class="controls">
      <button type="button" id="members-first">First members</button>
      <button type="button" id="members-next" disabled>Next members</button>
    </div>
    <h3>Metadata <span id="channel-revision"></span></h3>
    <table id="channel-metadata">
      <thead><tr><th>key</th><th>value</th><th>revision</th><th>updated</th><th>by</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>

  <section id="users-panel">
    <h2>Online users <span class="muted">(this node)</span></h2>
    <p id="users-summary" class="muted"></p>
    <form id="user-lookup" class="controls">
      <input id="user-id" placeholder="any user id" size="18">
      <button type="submit">Show user</button>
      <button type="button" id="users-first">First page</button>
      <button type="button" id="users-next" disabled>Next page</button>
    </form>
    <table id="users">
      <thead><tr><th>user</th><th>sessions</th><th>devices</th><th>clients</th><th>since</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>

  <section id="user-panel">
    <h2>User <span id="user-name" class="value"></span></h2>
    <p id="user-summary" class="muted">Pick a user.</p>
    <h3>Sessions on this node</h3>
    <table id="user-sessions">
      <thead><tr><th>session</th><th>device</th><th>client</th><th>since</th></tr></thead>
      <tbody></tbody>
    </table>
    <h3>Channels and state</h3>
    <table id="user-channels">
      <thead><tr><th>channel</th><th>type</th><th>state</th></tr></thead>
      <tbody></tbody>
    </table>
    <h3>Metadata <span id="user-revision"></span></h3>
    <table id="user-metadata">
      <thead><tr><th>key</th><th>value</th><th>revision</th><th>updated</th><th>by</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
</main>
<script>
"use strict";
// Polls the inspector's JSON API about once a second and redraws. Everything shown is set as text, never as HTML.
(() => {
  const POLL_MS = 1000;
  const API = location.pathname.replace(/\/?$/, "/") + "api/";   // /inspector/api/ beside the page
  const $ = (id) => document.getElementById(id);
  const view = {
    channels: { cursor: "", cursors: [], next: "" },      // the page shown, the pages before, the next one
    channel: null,                                        // {name, type, page, next}
    users: { cursor: "", next: "" },
    user: null,                                           // user id
    polls: 0,
  };
  window.inspector = view;                                // for a look from the console (and the tests)

  // The token: from the fragment (#token=…, which never reaches a server log) or the form, kept in sessionStorage.
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("token")) {
    sessionStorage.setItem("switchboard-inspector-token", fragment.get("token"));
    history.replaceState(null, "", location.pathname + location.search);
  }
  const token = () => sessionStorage.getItem("switchboard-inspector-token") || "";
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem("switchboard-inspector-token", $("token").value.trim());
    $("token").value = "";
    refresh();
  });
  $("forget").addEventListener("click", () => { sessionStorage.removeItem("switchboard-inspector-token"); refresh(); });

  class ApiError extends Error {
    constructor(status, body) {
      super(body && body.error ? `${status} ${body.error.name}: ${body.error.message}` : `HTTP ${status}`);
      this.status = status;
    }
  }

  async function api(name, params) {
    const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v != null));
    const headers = token() ? { Authorization: `Bearer ${token()}` } : {};
    const response = await fetch(`${API}${name}?${query}`, { headers, cache: "no-store" });
    const body = await response.json().catch(() => null);
    if (!response.ok) throw new ApiError(response.status, body);
    return body;
  }

  // Drawing: rows of text cells; a cell whose text changed since the last drawing flashes.
  const time = (ms) => (ms ? new Date(Number(ms)).toLocaleString() : "");
  const stateText = (items) => items.map((item) => `${item.key}=${item.value}`).join("\n");

  function fill(table, rows, columns, { key, pick, selected, empty } = {}) {
    const body = $(table).tBodies[0];
    const before = new Map([...body.rows].map((row) => [row.dataset.key, [...row.cells].map((c) => c.textContent)]));
    body.replaceChildren();
    for (const item of rows) {
      const row = body.insertRow();
      row.dataset.key = key(item);
      const old = before.get(row.dataset.key);
      columns.forEach((column, index) => {
        const cell = row.insertCell();
        cell.textContent = String(column.text(item));
        if (column.className) cell.className = column.className;
        if (old && old[index] !== cell.textContent) cell.classList.add("changed");
      });
      if (pick) {
        row.classList.add("pick");
        row.addEventListener("click", () => pick(item));
      }
      if (selected && selected(item)) row.classList.add("selected");
    }
    if (rows.length === 0 && empty) {
      const cell = body.insertRow().insertCell();
      cell.colSpan = columns.length;
      cell.className = "empty";
      cell.textContent = empty;
    }
  }

  const metadataColumns = [
    { text: (i) => i.key, className: "value key" },
    { text: (i) => i.value, className: "value" },
    { text: (i) => i.revision, className: "number" },
    { text: (i) => time(i.updateTs) },
    { text: (i) => i.authorUserId },
  ];

  function drawChannels(answer) {
    view.channels.next = answer.nextCursor;
    $("channels-next").disabled = !answer.nextCursor;
    fill("channels", answer.channels, [
      { text: (c) => c.name, className: "value" },
      { text: (c) => c.type },
      { text: (c) => c.users, className: "number" },
      { text: (c) => c.sessions, className: "number" },
    ], {
      key: (c) => `${c.type}:${c.name}`,
      pick: (c) => { view.channel = { name: c.name, type: c.type, page: "", next: "" }; refresh(); },
      selected: (c) => view.channel && view.channel.name === c.name && view.channel.type === c.type,
      empty: "no channels",
    });
  }

  function drawChannel(answer) {
    $("channel-name").textContent = `${answer.name} (${answer.type})`;
    $("channel-summary").textContent = `${answer.occupancy} visible member${answer.occupancy === 1 ? "" : "s"}`;
    view.channel.next = answer.nextPage;
    $("members-next").disabled = !answer.nextPage;
    fill("members", answer.members, [
      { text: (m) => m.userId, className: "value" },
      { text: (m) => stateText(m.state), className: "value" },
    ], { key: (m) => m.userId, pick: (m) => { view.user = m.userId; refresh(); }, empty: "no members" });
    $("channel-revision").textContent = `(revision ${answer.metadata.majorRevision})`;
    fill("channel-metadata", answer.metadata.items, metadataColumns, { key: (i) => i.key, empty: "no metadata" });
  }

  function drawUsers(answer) {
    $("users-summary").textContent = `${answer.total} user${answer.total === 1 ? "" : "s"} online here`;
    view.users.next = answer.nextCursor;
    $("users-next").disabled = !answer.nextCursor;
    fill("users", answer.users, [
      { text: (u) => u.userId, className: "value" },
      { text: (u) => u.sessions, className: "number" },
      { text: (u) => u.devices.join(", ") },
      { text: (u) => u.clientTypes.join(", ") },
      { text: (u) => time(u.sinceMs) },
    ], {
      key: (u) => u.userId,
      pick: (u) => { view.user = u.userId; refresh(); },
      selected: (u) => u.userId === view.user,
      empty: "nobody online here",
    });
  }

  function drawUser(answer) {
    $("user-name").textContent = answer.userId;
    const where = answer.online === undefined ? "" : answer.online ? "online"
      : answer.lastSeenMs ? `offline, last seen ${time(answer.lastSeenMs)}` : "offline, never seen";
    $("user-summary").textContent = [where, `${answer.sessions.length} session(s) here`,
      `in ${answer.totalChannels} channel(s)`].filter(Boolean).join(" · ");
    fill("user-sessions", answer.sessions, [
      { text: (s) => s.sessionId, className: "value" },
      { text: (s) => s.deviceId },
      { text: (s) => s.clientType },
      { text: (s) => time(s.startedAtMs) },
    ], { key: (s) => s.sessionId, empty: "no sessions here" });
    fill("user-channels", answer.channels, [
      { text: (c) => c.name, className: "value" },
      { text: (c) => c.type },
      { text: (c) => stateText(c.state), className: "value" },
    ], {
      key: (c) => `${c.type}:${c.name}`,
      pick: (c) => { view.channel = { name: c.name, type: c.type, page: "", next: "" }; refresh(); },
      empty: "in no channel",
    });
    $("user-revision").textContent = `(revision ${answer.metadata.majorRevision})`;
    fill("user-metadata", answer.metadata.items, metadataColumns, { key: (i) => i.key, empty: "no metadata" });
  }

  // Paging and picking.
  $("channel-prefix").addEventListener("input", () => { view.channels.cursor = ""; view.channels.cursors = []; refresh(); });
  $("channel-type").addEventListener("change", () => { view.channels.cursor = ""; view.channels.cursors = []; refresh(); });
  $("channels-first").addEventListener("click", () => { view.channels.cursor = ""; view.channels.cursors = []; refresh(); });
  $("channels-next").addEventListener("click", () => {
    view.channels.cursors.push(view.channels.cursor);
    view.channels.cursor = view.channels.next;
    refresh();
  });
  $("members-first").addEventListener("click", () => { if (view.channel) { view.channel.page = ""; refresh(); } });
  $("members-next").addEventListener("click", () => { if (view.channel) { view.channel.page = view.channel.next; refresh(); } });
  $("users-first").addEventListener("click", () => { view.users.cursor = ""; refresh(); });
  $("users-next").addEventListener("click", () => { view.users.cursor = view.users.next; refresh(); });
  $("user-lookup").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = $("user-id").value.trim();
    if (id) { view.user = id; refresh(); }
  });

  // The poll: every part asked at once, each drawn as it is; the next poll a second after this one ended.
  let timer = null;
  let running = false;
  let again = false;                                       // something was picked while a poll ran
  async function poll() {
    running = true;
    again = false;
    clearTimeout(timer);
    const parts = [
      api("channels", { type: $("channel-type").value, prefix: $("channel-prefix").value, cursor: view.channels.cursor })
        .then(drawChannels),
      api("users", { cursor: view.users.cursor }).then(drawUsers),
    ];
    if (view.channel) {
      parts.push(api("channel", { name: view.channel.name, type: view.channel.type, page: view.channel.page })
        .then(drawChannel));
    }
    if (view.user) parts.push(api("user", { id: view.user }).then(drawUser));
    const results = await Promise.allSettled(parts);
    const failed = results.find((r) => r.status === "rejected");
    view.polls += 1;
    $("status").className = failed ? "error" : "";
    $("status").textContent = failed
      ? (failed.reason.status === 401 || failed.reason.status === 403 ? `token refused: ${failed.reason.message}`
        : String(failed.reason.message))
      : `live · updated ${new Date().toLocaleTimeString()}`;
    running = false;
    timer = setTimeout(poll, again ? 0 : failed && failed.reason.status === 401 ? 3 * POLL_MS : POLL_MS);
  }

  function refresh() {
    if (running) again = true;
    else poll();
  }

  poll();
})();
</script>
</body>
</html>
"""#
}
