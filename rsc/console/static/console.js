// The console's pages: one websocket feed (/ws) per page, rendered with DOM nodes.
// Every name and id from the coordinator is set with textContent (or Node.append of a
// string), never parsed as markup. Figures are whole numbers written as 1,234.
"use strict";

(function () {
  const TOKEN_KEY = "rsc-console-token";
  const RECONNECT_MS = [500, 1000, 2000, 3000, 5000];
  // C4: the charts reach back an hour; points older than a minute are merged into 20 s
  // buckets (their largest figures), as the console's own history (rsc/console/views.py)
  const HISTORY_MS = 60 * 60 * 1000;
  const HISTORY_RECENT_MS = 60 * 1000;
  const HISTORY_BUCKET_MS = 20 * 1000;
  const figure = new Intl.NumberFormat("en-US", {maximumFractionDigits: 0});
  const page = document.body.dataset.page;
  const $ = (id) => document.getElementById(id);

  const state = {
    socket: null,
    attempts: 0,
    everConnected: false,
    waitingForToken: false,
    reconnectTimer: null,
    lastError: null,
    overview: null,
    sort: {key: "streamPrefix", dir: 1},
    view: null,
    viewAt: 0,  // C4: when the view's ages were read (Date.now() less the frame's viewMsAgo)
    history: [],
    actions: false,  // C1: this page's token may act (the console says so at login)
    pendingAction: null,
    deadLetters: null,  // P3: the group's dead letters as last read
    nextActionId: 1,
    lastRead: null,  // C2: the messages page's last read, and the next page's
    nextRead: null,
  };

  // --- small helpers ------------------------------------------------------------------

  function num(value) {
    return value === null || value === undefined ? "unknown" : figure.format(value);
  }

  function cell(row, content, cls) {
    const td = document.createElement("td");
    if (cls) {
      td.className = cls;
    }
    if (content instanceof Node) {
      td.appendChild(content);
    } else {
      td.textContent = content === null || content === undefined ? "-" : String(content);
    }
    row.appendChild(td);
    return td;
  }

  function ids(list) {
    const span = document.createElement("span");
    span.className = "ids";
    span.textContent = list.length ? list.join(" ") : "-";
    return span;
  }

  function groupLink(prefix, group) {
    const link = document.createElement("a");
    link.href = "/group?" + new URLSearchParams({prefix: prefix, group: group}).toString();
    link.textContent = group;
    return link;
  }

  function clear(element) {
    while (element.firstChild) {
      element.removeChild(element.firstChild);
    }
  }

  function clock() {
    return new Date().toLocaleTimeString("en-GB", {hour12: false});
  }

  function setStatus(text, kind) {
    const status = $("status");
    status.textContent = text;
    status.className = "status " + (kind || "");
  }

  // --- the feed -----------------------------------------------------------------------

  function hello() {
    const body = {view: page, token: sessionStorage.getItem(TOKEN_KEY)};
    if (page === "group" || page === "messages") {
      const query = new URLSearchParams(location.search);
      body.streamPrefix = query.get("prefix");
      body.consumerGroup = query.get("group");
    }
    return body;
  }

  function connect() {
    if (state.reconnectTimer !== null) {
      clearTimeout(state.reconnectTimer);
      state.reconnectTimer = null;
    }
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws");
    state.socket = socket;
    socket.addEventListener("open", () => socket.send(JSON.stringify(hello())));
    socket.addEventListener("message", (event) => {
      let body;
      try {
        body = JSON.parse(event.data);
      } catch (problem) {
        return;
      }
      receive(body);
    });
    socket.addEventListener("close", () => {
      if (state.socket !== socket) {
        return;
      }
      state.socket = null;
      if (!state.waitingForToken) {
        reconnectLater();
      }
    });
  }

  function reconnectLater() {
    const delay = RECONNECT_MS[Math.min(state.attempts, RECONNECT_MS.length - 1)];
    state.attempts += 1;
    const what = (state.everConnected ? "connection lost" : "cannot reach the console") +
      (state.lastError ? ` (${state.lastError})` : "");
    state.lastError = null;
    setStatus(`${what}; reconnecting in ${Math.round(delay / 100) / 10} s (attempt ${state.attempts})`,
      "lost");
    state.reconnectTimer = setTimeout(connect, delay);
  }

  function receive(body) {
    if (body.type === "auth") {
      if (body.status === "ok") {
        const again = state.everConnected && state.attempts > 0;
        state.everConnected = true;
        state.attempts = 0;
        $("login").hidden = true;
        $("content").hidden = false;
        state.actions = body.actions === true;
        if (page === "group") {
          $("actions").hidden = !state.actions;
          $("member-actions").hidden = !state.actions;
        }
        setStatus(again ? `live, reconnected at ${clock()}` : "live", "live");
      } else {
        askForToken(body.tokenGiven, body.status === "throttled");
      }
    } else if (body.type === "error") {
      state.lastError = body.error;
      setStatus(`error: ${body.error}`, "lost");
    } else if (body.type === "overview" && page === "overview") {
      state.overview = body;
      renderOverview();
    } else if (body.type === "group" && page === "group") {
      renderGroup(body);
      if (body.deadLetters) {
        renderDeadLetters(body.deadLetters);
      }
    } else if (body.type === "history" && page === "group") {
      mergeHistory(body.points);
    } else if (body.type === "actionResult" && page === "group") {
      actionResult(body);
    } else if (body.type === "audit" && page === "audit") {
      renderAudit(body.rows);
    } else if (body.type === "messages" && page === "messages") {
      setUpShards(body);
    } else if (body.type === "readResult" && page === "messages") {
      readResult(body);
    }
  }

  function askForToken(tokenGiven, throttled) {
    state.waitingForToken = true;
    sessionStorage.removeItem(TOKEN_KEY);
    $("content").hidden = true;
    state.overview = null;
    state.view = null;
    $("login").hidden = false;
    const problem = $("login-error");
    problem.hidden = !tokenGiven;
    problem.textContent = !tokenGiven ? "" : throttled
      ? "Too many wrong tokens from this address: wait a minute, then try again."
      : "Wrong token: the coordinator refused it (HTTP 401).";
    setStatus("", "");
    $("token").focus();
  }

  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token").value;
    if (!token) {
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    $("token").value = "";
    state.waitingForToken = false;
    $("login-error").hidden = true;
    if (state.socket !== null) {
      state.socket.close();
      state.socket = null;
    }
    connect();
  });

  // --- overview -----------------------------------------------------------------------

  function compare(a, b, key) {
    const x = a[key];
    const y = b[key];
    if (x === y) {
      return 0;
    }
    if (x === null || x === undefined) {
      return 1;
    }
    if (y === null || y === undefined) {
      return -1;
    }
    if (typeof x === "number" && typeof y === "number") {
      return x - y;
    }
    return String(x).localeCompare(String(y));
  }

  function shownRows() {
    const text = $("filter").value.trim().toLowerCase();
    const wantedState = $("state-filter").value;
    const blockedOnly = $("blocked-only").checked;
    const rows = state.overview.rows.filter((row) =>
      (!text || row.streamPrefix.toLowerCase().includes(text) ||
        row.consumerGroup.toLowerCase().includes(text)) &&
      (!wantedState || row.state === wantedState) && (!blockedOnly || row.blocked));
    const {key, dir} = state.sort;
    rows.sort((a, b) => dir * compare(a, b, key) || compare(a, b, "streamPrefix") ||
      compare(a, b, "consumerGroup"));
    return rows;
  }

  function sumOf(rows, key) {
    let total = 0;
    for (const row of rows) {
      if (row[key] === null || row[key] === undefined) {
        return null;
      }
      total += row[key];
    }
    return total;
  }

  function renderOverview() {
    if (state.overview === null) {
      return;
    }
    const all = state.overview.totals;
    $("summary").textContent = `${num(all.groups)} group(s) in ${num(all.prefixes)} prefix(es): ` +
      `${num(all.members)} member(s), ${num(all.shards)} shard(s), backlog ${num(all.backlog)} ` +
      `(undelivered ${num(all.lag)}, unacked ${num(all.pending)})`;
    const rows = shownRows();
    const body = document.querySelector("#groups tbody");
    clear(body);
    for (const row of rows) {
      const tr = document.createElement("tr");
      tr.dataset.prefix = row.streamPrefix;
      tr.dataset.group = row.consumerGroup;
      cell(tr, row.streamPrefix, "name");
      cell(tr, groupLink(row.streamPrefix, row.consumerGroup), "name");
      cell(tr, row.state, "state " + String(row.state).toLowerCase());
      cell(tr, num(row.groupEpoch), "num");
      cell(tr, num(row.members), "num");
      cell(tr, num(row.shards), "num");
      cell(tr, num(row.backlog), "num");
      cell(tr, num(row.lag), "num");
      cell(tr, num(row.pending), "num");
      cell(tr, row.migration, row.blocked ? "blocked" : "");
      body.appendChild(tr);
    }
    const foot = document.querySelector("#groups tfoot");
    clear(foot);
    const tr = document.createElement("tr");
    cell(tr, `total (${figure.format(rows.length)} shown)`);
    cell(tr, "");
    cell(tr, "");
    cell(tr, "");
    cell(tr, num(sumOf(rows, "members")), "num");
    cell(tr, num(sumOf(rows, "shards")), "num");
    cell(tr, num(sumOf(rows, "backlog")), "num");
    cell(tr, num(sumOf(rows, "lag")), "num");
    cell(tr, num(sumOf(rows, "pending")), "num");
    cell(tr, "");
    foot.appendChild(tr);
    $("empty").hidden = rows.length > 0;
    for (const th of document.querySelectorAll("#groups thead th")) {
      th.setAttribute("aria-sort", th.dataset.key === state.sort.key ?
        (state.sort.dir > 0 ? "ascending" : "descending") : "none");
    }
  }

  function setUpOverview() {
    for (const th of document.querySelectorAll("#groups thead th")) {
      th.querySelector("button").addEventListener("click", () => {
        const key = th.dataset.key;
        state.sort = {key: key, dir: state.sort.key === key ? -state.sort.dir : 1};
        renderOverview();
      });
    }
    for (const id of ["filter", "state-filter", "blocked-only"]) {
      $(id).addEventListener("input", renderOverview);
    }
  }

  // --- group page ---------------------------------------------------------------------

  function fact(list, name, value) {
    const dt = document.createElement("dt");
    dt.textContent = name;
    const dd = document.createElement("dd");
    if (value instanceof Node) {
      dd.appendChild(value);
    } else {
      dd.textContent = value;
    }
    list.append(dt, dd);
  }

  function retentionText(retention) {
    if (!retention) {
      return "-";
    }
    const caps = [];
    if (retention.maxLength !== null && retention.maxLength !== undefined) {
      caps.push(`max length ${num(retention.maxLength)}`);
    }
    if (retention.maxAgeMs !== null && retention.maxAgeMs !== undefined) {
      caps.push(`max age ${num(retention.maxAgeMs)} ms`);
    }
    return retention.mode + (caps.length ? ", " + caps.join(", ") : "");
  }

  function renderGroup(body) {
    const query = new URLSearchParams(location.search);
    $("crumb-prefix").textContent = query.get("prefix") || "";
    $("crumb-group").textContent = query.get("group") || "";
    if (body.status !== "OK") {
      state.view = null;
      $("group-body").hidden = true;
      const unknown = $("unknown");
      unknown.hidden = false;
      unknown.textContent = `The coordinator does not know group ${body.consumerGroup} of prefix ` +
        `${body.streamPrefix} (not created yet, or deleted); waiting for it.`;
      return;
    }
    $("unknown").hidden = true;
    $("group-body").hidden = false;
    const view = body.view;
    state.view = view;
    state.viewAt = Date.now() - (body.viewMsAgo || 0);
    document.title = `${view.consumerGroup} (${view.streamPrefix}) - rsc console`;
    $("title").textContent = `${view.streamPrefix} / ${view.consumerGroup}`;

    const facts = $("facts");
    clear(facts);
    fact(facts, "State", view.state);
    fact(facts, "Group epoch", num(view.groupEpoch));
    fact(facts, "Assignment epoch", num(view.assignmentEpoch));
    fact(facts, "Routing", `version ${num(view.routingVersion)}, ${num(view.shardCount)} shard(s)`);
    fact(facts, "Max concurrency", view.maxConcurrency === null ? "members' capacity" :
      num(view.maxConcurrency));
    fact(facts, "Retention", retentionText(view.retention));
    fact(facts, "Backlog", `${num(view.backlog)} (undelivered ${num(view.lag)}, ` +
      `unacked ${num(view.pending)})`);
    if (view.laggiest) {
      const span = document.createElement("span");
      span.className = "ids";
      span.textContent = `${view.laggiest.shard}: backlog ${num(view.laggiest.backlog)} ` +
        `(undelivered ${num(view.laggiest.lag)}, unacked ${num(view.laggiest.pending)}), ` +
        `owner ${view.laggiest.owner || "none"}`;
      fact(facts, "Most behind", span);
    } else {
      fact(facts, "Most behind", "none (nothing undelivered, nothing unacked)");
    }
    if (view.storeWentBackAtMs !== null && view.storeWentBackAtMs !== undefined) {
      // K3, K4: the coordinator wrote a store that went back or lost everything back
      fact(facts, "Store went back", `${new Date(view.storeWentBackAtMs).toISOString()}: ` +
        "written back from the coordinator's memory");
    }

    renderMigration(view);
    renderMembers(view);
    renderShards(view);
    record(view);
    drawChart();
  }

  function renderMigration(view) {
    const migration = view.migration;
    $("migration").hidden = migration === null;
    if (migration === null) {
      return;
    }
    $("migration-line").textContent = `version ${num(migration.fromVersion)} to ` +
      `${num(migration.toVersion)}: ${migration.state}, cutover ${migration.cutover}`;
    const progress = $("migration-progress");
    progress.max = Math.max(1, migration.total);
    progress.value = migration.drained;
    $("migration-count").textContent = `${num(migration.drained)} of ${num(migration.total)} old ` +
      "shard(s) drained";
    const body = document.querySelector("#blockers tbody");
    clear(body);
    for (const blocker of migration.blockingGroups) {
      const tr = document.createElement("tr");
      cell(tr, groupLink(view.streamPrefix, blocker.consumerGroup), "name");
      cell(tr, num(blocker.undelivered), "num");
      cell(tr, num(blocker.pending), "num");
      body.appendChild(tr);
    }
    $("blockers").hidden = migration.blockingGroups.length === 0;
    $("no-blockers").hidden = migration.blockingGroups.length > 0;
    $("remaining").textContent = migration.remainingShards.length ?
      migration.remainingShards.join(" ") : "none";
  }

  function renderMembers(view) {
    const body = document.querySelector("#members tbody");
    clear(body);
    for (const member of view.members) {
      const tr = document.createElement("tr");
      tr.dataset.memberId = member.memberId;
      if (member.overdue) {
        tr.className = "overdue";
      }
      cell(tr, member.memberId, "id");
      cell(tr, member.instanceId === null || member.instanceId === undefined ? "-" :
        member.instanceId, "id");
      cell(tr, member.state, "state");
      cell(tr, num(member.memberEpoch), "num");
      cell(tr, num(member.capacity), "num");
      cell(tr, member.lastHeartbeatMsAgo === null || member.lastHeartbeatMsAgo === undefined ? "-" :
        `${num(member.lastHeartbeatMsAgo)} ms ago${member.overdue ? " (overdue)" : ""}`, "num");
      cell(tr, ids(member.assignedShards));
      cell(tr, ids(member.pendingShards));
      cell(tr, ids(member.revokingShards));
      if (state.actions) {
        const remove = document.createElement("button");
        remove.type = "button";
        remove.className = "remove";
        remove.textContent = "Remove";
        remove.addEventListener("click", () => confirmAction("Remove a member",
          [`member ${member.memberId} leaves the group (epoch ${num(view.groupEpoch)} moves on)`,
            `its shards (${member.assignedShards.join(" ") || "none"}) move to the other members`],
          "removeMember", {memberId: member.memberId}));
        cell(tr, remove);
      }
      body.appendChild(tr);
    }
    $("member-count").textContent = `(${num(view.members.length)})`;
    $("no-members").hidden = view.members.length > 0;
  }

  function renderShards(view) {
    const body = document.querySelector("#shards tbody");
    clear(body);
    for (const shard of view.shards) {
      const tr = document.createElement("tr");
      tr.dataset.shard = shard.shard;
      if (view.laggiest && view.laggiest.shard === shard.shard) {
        tr.className = "laggiest";
      }
      cell(tr, shard.shard, "id");
      cell(tr, num(shard.version), "num");
      let owner = shard.owner === null || shard.owner === undefined ? "none" : shard.owner;
      if (shard.revokingFrom) {
        owner += ` (revoking from ${shard.revokingFrom})`;
      }
      cell(tr, owner, "id");
      cell(tr, num(shard.length), "num");
      cell(tr, num(shard.backlog), "num");
      cell(tr, num(shard.lag), "num");
      cell(tr, num(shard.pending), "num");
      cell(tr, shard.oldestPendingMs === null || shard.oldestPendingMs === undefined ? "-" :
        `${num(shard.oldestPendingMs)} ms`, "num");
      cell(tr, shard.lastDeliveredId, "id");
      body.appendChild(tr);
    }
    $("shard-count").textContent = `(${num(view.shards.length)})`;
  }

  // lag over time: a point per update and one a second between them (the line runs on).
  // Points are [time, undelivered, unacked, oldest undelivered's age, oldest unacked's age]
  // (ages in ms, null when there is no such entry), as the console's history sends them.
  // Between updates the counts stay and the ages grow with the clock: the coordinator pushes
  // whenever a shard's counts, length or last-delivered id change (C4's ages alone do not
  // push), so until the next push the oldest entries are the same ones, only older.
  function record(view) {
    const now = Date.now();
    const since = Math.max(0, now - state.viewAt);
    const aged = (age) => (age === null || age === undefined ? null : age + since);
    state.history.push([now, view.lag, view.pending, aged(view.oldestUndeliveredAgeMs),
      aged(view.oldestPendingEntryAgeMs)]);
    state.history = compact(state.history, now);
  }

  const isBreak = (point) => point.slice(1).every((value) => value === null || value === undefined);
  const larger = (a, b) => (a === null || a === undefined ? b :
    b === null || b === undefined ? a : Math.max(a, b));

  // the last hour, with what is older than a minute in 20 s buckets: a few hundred points
  function compact(points, now) {
    const kept = [];
    for (const point of points) {
      if (point[0] < now - HISTORY_MS) {
        continue;
      }
      const last = kept.length ? kept[kept.length - 1] : null;
      if (last !== null && point[0] < now - HISTORY_RECENT_MS && !isBreak(point) &&
          !isBreak(last) &&
          Math.floor(last[0] / HISTORY_BUCKET_MS) === Math.floor(point[0] / HISTORY_BUCKET_MS)) {
        kept[kept.length - 1] = [last[0]].concat(
          last.slice(1).map((value, i) => larger(value, point[i + 1])));
        continue;
      }
      kept.push(point);
    }
    return kept;
  }

  // the minutes before this page: what the console saw while other pages (or this one,
  // before a reload) followed the group; a null point is a stretch nobody watched
  function mergeHistory(points) {
    const first = state.history.length ? state.history[0][0] : Infinity;
    const earlier = points.filter(([t]) => t < first);
    if (earlier.length && !isBreak(earlier[earlier.length - 1]) && state.history.length &&
        first - earlier[earlier.length - 1][0] > 5000) {
      earlier.push([first - 1, null, null, null, null]);  // a gap between the two: no line across
    }
    state.history = earlier.concat(state.history);
    drawChart();
  }

  function drawChart() {
    if (!window.RscChart || state.history.length === 0) {
      return;
    }
    const now = Date.now();
    $("lag-chart").dataset.first = String(state.history[0][0]);  // where the line starts
    const windowMs = Math.min(HISTORY_MS, Math.max(60000, now - state.history[0][0]));
    const lag = state.history.map(([t, l]) => [t, l]);
    const pending = state.history.map(([t, , p]) => [t, p]);
    window.RscChart.draw($("lag-chart"), [
      {name: "undelivered", cls: "lag", points: lag},
      {name: "unacked", cls: "pending", points: pending},
    ], {now: now, windowMs: windowMs});
    // C4: the same points' ages, in seconds; no entry waiting is 0 s (as the coordinator's
    // rsc_group_lag_seconds), a break stays a gap
    const seconds = (i) => state.history.map((point) => [point[0], isBreak(point) ? null :
      (point[i] === null || point[i] === undefined ? 0 : point[i] / 1000)]);
    $("age-chart").dataset.first = String(state.history[0][0]);
    window.RscChart.draw($("age-chart"), [
      {name: "oldest undelivered", cls: "lag", points: seconds(3)},
      {name: "oldest unacked", cls: "pending", points: seconds(4)},
    ], {now: now, windowMs: windowMs, unit: "s"});
  }

  function tick() {
    if (page === "group" && state.view !== null) {
      const last = state.history[state.history.length - 1];
      if (last && Date.now() - last[0] >= 1000) {
        record(state.view);
      }
      drawChart();
    }
  }

  // --- actions (C1) --------------------------------------------------------------------

  // what the operator confirms: the changes, and the group epoch and routing version seen
  function confirmAction(title, changes, action, params) {
    const view = state.view;
    if (view === null) {
      return;
    }
    const at = {groupEpoch: view.groupEpoch, routingVersion: view.routingVersion};
    state.pendingAction = {action: action, params: params, confirmedAt: at};
    $("confirm-title").textContent = `${title}: ${view.streamPrefix} / ${view.consumerGroup}`;
    const list = $("confirm-changes");
    clear(list);
    for (const change of changes) {
      const item = document.createElement("li");
      item.textContent = change;
      list.appendChild(item);
    }
    $("confirm-at").textContent = `as seen at group epoch ${num(at.groupEpoch)}, routing ` +
      `version ${num(at.routingVersion)}: if either moves first, nothing is done`;
    $("confirm").showModal();
  }

  function sendAction(action, params, confirmedAt) {
    if (state.socket === null) {
      $("action-result").textContent = `${action}: not sent, the connection is down`;
      return;
    }
    const id = state.nextActionId++;
    state.socket.send(JSON.stringify({type: "action", id: id, action: action, params: params,
      confirmedAt: confirmedAt}));
    $("action-result").textContent = `${action}: sent, waiting for the answer`;
  }

  // P3: the group's dead letters (count, stream, errors, retention; never contents)
  function renderDeadLetters(body) {
    if (body.status !== "OK") {
      $("dead-letter-count").textContent = "";
      $("dead-letters-line").textContent = `not read: ${body.status}: ${body.error || ""}`;
      return;
    }
    state.deadLetters = body;
    $("dead-letter-count").textContent = `(${num(body.count)})`;
    const errors = Object.entries(body.errorsByType || {}).sort((a, b) => b[1] - a[1])
      .map(([name, count]) => `${name} ${num(count)}`);
    $("dead-letters-line").textContent = `${num(body.count)} in ${body.stream || "-"}` +
      (errors.length ? `; errors: ${errors.join(", ")}` : "") +
      `; retention: ${body.retention ? retentionText(body.retention) : "none (kept until re-driven)"}`;
  }

  // the re-drive's dry run answered: its answer is what the confirmation shows
  function confirmRedrive(body) {
    const answer = body.answer;
    const changes = (answer.redriven || []).map((entry) =>
      `dead letter ${entry.id} -> ${entry.shard}`);
    if (changes.length === 0) {
      changes.push("no dead letter would be sent back");
    }
    for (const entry of answer.skipped || []) {
      changes.push(`stays: ${entry.id}: ${entry.reason}`);
    }
    changes.push(`each goes back to its source shard with rsc-redrive-group: ${answer.consumerGroup}` +
      " and is deleted from the dead letters once its write is confirmed");
    confirmAction(`Re-drive ${num((answer.redriven || []).length)} dead letter(s)`, changes,
      "redriveDeadLetters", {dryRun: false, max: optionalNumber("redrive-max")});
  }

  function actionResult(body) {
    if (body.dryRun && body.status === "OK" && body.answer &&
        body.action === "redriveDeadLetters") {
      confirmRedrive(body);
      return;
    }
    if (body.dryRun && body.status === "OK" && body.answer) {
      // reset offsets: the dry run's answer is what the confirmation shows
      const view = state.view;
      const before = new Map((view ? view.shards : []).map((s) => [s.shard, s.lastDeliveredId]));
      const changes = body.answer.shards.map((shard) =>
        `${shard.shard}: last delivered ${before.get(shard.shard) || "none"} -> ${shard.lastDeliveredId}`);
      changes.push(`its ${num(view ? view.pending : null)} unacked entries are dropped`);
      confirmAction("Reset offsets", changes, "resetOffsets",
        {to: body.answer.to || $("reset-to").value, dryRun: false});
      return;
    }
    const line = `${body.action || "action"}: ${body.status}` + (body.error ? `: ${body.error}` : "");
    $("action-result").textContent = line;
    $("action-result").className = "summary " + (body.status === "OK" ? "ok" : "refused");
  }

  function optionalNumber(id) {
    const text = $(id).value.trim();
    return text === "" ? null : Number(text);
  }

  function setUpActions() {
    $("confirm-yes").addEventListener("click", () => {
      const pending = state.pendingAction;
      state.pendingAction = null;
      $("confirm").close();
      if (pending !== null) {
        sendAction(pending.action, pending.params, pending.confirmedAt);
      }
    });
    $("confirm-no").addEventListener("click", () => {
      state.pendingAction = null;
      $("confirm").close();
      $("action-result").textContent = "cancelled: nothing was sent";
    });
    $("action-shards").addEventListener("submit", (event) => {
      event.preventDefault();
      const view = state.view;
      const count = Number($("shards-input").value);
      confirmAction("Set shards", [
        `prefix ${view.streamPrefix}: ${num(view.shardCount)} -> ${num(count)} shard(s), ` +
          `routing version ${num(view.routingVersion)} -> ${num((view.routingVersion || 0) + 1)}`,
        "every group of the prefix drains the old shards before they are retired"],
      "setShardCount", {shardCount: count});
    });
    $("action-concurrency").addEventListener("submit", (event) => {
      event.preventDefault();
      const view = state.view;
      const value = optionalNumber("concurrency-input");
      confirmAction("Set max concurrency", [`max concurrency: ${view.maxConcurrency === null ?
        "members' capacity" : num(view.maxConcurrency)} -> ${value === null ? "members' capacity" :
        num(value)}`], "setMaxConcurrency", {maxConcurrency: value});
    });
    $("action-retention").addEventListener("submit", (event) => {
      event.preventDefault();
      const view = state.view;
      const wanted = {mode: $("retention-mode").value, maxLength: optionalNumber("retention-length"),
        maxAgeMs: optionalNumber("retention-age")};
      confirmAction("Set retention", [`retention of prefix ${view.streamPrefix}: ` +
        `${retentionText(view.retention)} -> ${retentionText(wanted)}`], "setRetention", wanted);
    });
    $("action-reset").addEventListener("submit", (event) => {
      event.preventDefault();
      const view = state.view;
      // the dry run first: its answer is what the confirmation shows
      sendAction("resetOffsets", {to: $("reset-to").value, dryRun: true},
        {groupEpoch: view.groupEpoch, routingVersion: view.routingVersion});
    });
    $("action-redrive").addEventListener("submit", (event) => {
      event.preventDefault();
      const view = state.view;
      // the dry run first: its answer is what the confirmation shows
      sendAction("redriveDeadLetters", {dryRun: true, max: optionalNumber("redrive-max")},
        {groupEpoch: view.groupEpoch, routingVersion: view.routingVersion});
    });
    $("action-delete").addEventListener("submit", (event) => {
      event.preventDefault();
      const view = state.view;
      confirmAction("Delete group", [`group ${view.consumerGroup} of ${view.streamPrefix} is ` +
        `deleted, with its consumer group on ${num(view.shards.length)} shard(s)`,
      `its backlog (${num(view.backlog)} entries) is no longer tracked; it needs no live member`],
      "deleteGroup", {});
    });
  }

  // --- audit log (C3) -----------------------------------------------------------------

  function renderAudit(rows) {
    const body = document.querySelector("#audit tbody");
    clear(body);
    for (const row of rows) {
      const tr = document.createElement("tr");
      tr.dataset.id = row.id;
      const when = typeof row.timeMs === "number" ?
        new Date(row.timeMs).toISOString().replace("T", " ").slice(0, 19) : "-";
      cell(tr, when, "id");
      cell(tr, row.via ? `${row.peer} (via ${row.via})` : row.peer, "id");
      cell(tr, row.role);
      cell(tr, row.request, "name");
      cell(tr, row.streamPrefix, "name");
      cell(tr, row.consumerGroup, "name");
      cell(tr, row.detail || "-", "ids");
      cell(tr, row.error ? `${row.status}: ${row.error}` : row.status,
        row.status === "OK" ? "" : "blocked");
      cell(tr, row.before || "-", "ids");
      body.appendChild(tr);
    }
    $("audit-empty").hidden = rows.length > 0;
  }

  // --- messages (C2) -----------------------------------------------------------------
  // Every key, value and name goes in with textContent: a hostile one stays text.

  function blobNode(blob) {
    const pre = document.createElement("pre");
    pre.className = "blob";
    if (blob === null || blob === undefined) {
      pre.textContent = "-";
      return pre;
    }
    let text;
    if (typeof blob.text === "string") {
      text = blob.text;
      try {
        const parsed = JSON.parse(text);
        if (typeof parsed === "object" && parsed !== null) {
          text = JSON.stringify(parsed, null, 2);
        }
      } catch (problem) {
        // not JSON: shown as it is
      }
    } else {
      text = "base64: " + blob.base64;
      pre.classList.add("base64");
    }
    if (blob.cut) {
      text += ` ... (${num(blob.size)} bytes in all)`;
    }
    pre.textContent = text;
    return pre;
  }

  function fieldsNode(entry) {
    const box = document.createElement("div");
    const named = [...(entry.headers || []).map((h) => ["h:" + h.name, h.value]),
      ...(entry.fields || []).map((f) => [f.name, f.value])];
    for (const [name, value] of named) {
      const line = document.createElement("div");
      const label = document.createElement("span");
      label.className = "name";
      label.textContent = name;
      line.append(label, blobNode(value));
      box.appendChild(line);
    }
    return box;
  }

  function setUpShards(body) {
    const select = $("shard");
    clear(select);
    for (const shard of body.shards) {
      const option = document.createElement("option");
      option.value = shard;
      option.textContent = shard;
      select.appendChild(option);
    }
    $("no-contents").hidden = body.contents === true;
    if (body.status !== "OK") {
      showReadError(`${body.status}: ${body.error}`);
    }
  }

  function showReadError(text) {
    $("read-error").hidden = !text;
    $("read-error").textContent = text || "";
  }

  function sendRead(request, params) {
    if (state.socket === null || state.socket.readyState !== WebSocket.OPEN) {
      showReadError("not connected");
      return;
    }
    state.lastRead = {request: request, params: params};
    state.socket.send(JSON.stringify({type: "read", id: state.nextActionId++, request: request,
      params: params}));
  }

  function readShardParams() {
    const params = {shard: $("shard").value, newestFirst: $("order").value === "newest"};
    const fromId = $("from-id").value.trim();
    const fromMs = $("from-ms").value.trim();
    if (fromId) {
      params.fromId = fromId;
    } else if (fromMs) {
      params.fromMs = Number(fromMs);
    }
    return params;
  }

  function readResult(body) {
    showReadError(body.status === "OK" ? "" : `${body.status}: ${body.error}`);
    const answer = body.answer || {};
    const next = body.status !== "OK" || !state.lastRead ? null :
      body.request === "readShard" && answer.nextId ?
        {request: "readShard", params: {...state.lastRead.params, fromId: answer.nextId,
          fromMs: undefined}} :
      body.request === "findKey" && answer.continueId ?
        {request: "findKey", params: {...state.lastRead.params, continueId: answer.continueId}} :
      body.request === "listPending" && answer.nextId ?
        {request: "listPending", params: {...state.lastRead.params, afterId: answer.nextId}} :
        null;
    state.nextRead = next;
    $("next").disabled = next === null;
    if (body.status !== "OK") {
      return;
    }
    const pending = body.request === "listPending";
    $("messages").hidden = pending;
    $("pending-entries").hidden = !pending;
    if (pending) {
      $("read-summary").textContent =
        `${num(answer.pending)} pending entries of the group in ${answer.shard}`;
      const tbody = document.querySelector("#pending-entries tbody");
      clear(tbody);
      for (const entry of answer.entries) {
        const tr = document.createElement("tr");
        cell(tr, entry.id, "id");
        cell(tr, entry.owner, "name");
        cell(tr, num(entry.idleMs), "num");
        cell(tr, num(entry.deliveries), "num");
        tbody.appendChild(tr);
      }
      return;
    }
    $("read-summary").textContent = body.request === "findKey" ?
      `${answer.entries.length} entries of the key in ` +
        `${(answer.shards && answer.shards.length ? answer.shards : [answer.shard]).join(" and ")} ` +
        `(${num(answer.scanned)} scanned)` :
      `${answer.entries.length} of ${num(answer.length)} entries of ${answer.shard}`;
    const tbody = document.querySelector("#messages tbody");
    clear(tbody);
    for (const entry of answer.entries) {
      const tr = document.createElement("tr");
      tr.dataset.id = entry.id;
      cell(tr, entry.id, "id");
      cell(tr, blobNode(entry.key));
      cell(tr, blobNode(entry.value));
      cell(tr, fieldsNode(entry));
      tbody.appendChild(tr);
    }
  }

  function setUpMessages() {
    $("read").addEventListener("click", () => sendRead("readShard", readShardParams()));
    $("find").addEventListener("click", () => sendRead("findKey", {key: $("key").value}));
    $("pending").addEventListener("click", () => sendRead("listPending", {shard: $("shard").value}));
    $("next").addEventListener("click", () => {
      if (state.nextRead !== null) {
        sendRead(state.nextRead.request, state.nextRead.params);
      }
    });
  }

  // --- start --------------------------------------------------------------------------

  if (page === "overview") {
    setUpOverview();
  }
  if (page === "group") {
    setUpActions();
    $("messages-link").href = "/messages" + location.search;  // C2: this group's messages
  }
  if (page === "messages") {
    setUpMessages();
  }
  const query = new URLSearchParams(location.search);
  if (page === "group" && (!query.get("prefix") || !query.get("group"))) {
    $("content").hidden = false;
    $("group-body").hidden = true;
    $("unknown").hidden = false;
    $("unknown").textContent = "No group named: open a group from the overview (all groups).";
    return;
  }
  setInterval(tick, 1000);
  connect();
})();
