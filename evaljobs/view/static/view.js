// evaljobs view: live updates over Server-Sent Events. Data is only ever set as text (textContent),
// never parsed as HTML, except the fleet fragment, which the server renders with escaping.
"use strict";
(function () {
  const page = document.body.dataset.page;

  function setText(id, value) {
    const node = document.getElementById(id);
    if (node) node.textContent = String(value);
  }

  // With --epochs N a cell is a (scenario, model) over its N epochs: the new row sets its epoch's
  // letter in data-epochs ("PF·E…") and the cell is redrawn from the letters, as the server draws it.
  function epochCell(td, row) {
    const marks = (td.dataset.epochs || "").split("");
    marks[row.epoch] = row.status.charAt(0).toUpperCase();
    td.dataset.epochs = marks.join("");
    const count = (letter) => marks.filter((m) => m === letter).length;
    const passed = count("P"), failed = count("F"), errored = count("E");
    const status = failed ? "failed" : errored ? "errored" : passed === marks.length ? "passed" : "pending";
    td.className = "cell fresh st-" + status;
    const mark = document.createElement("span");
    mark.className = "mark";
    mark.textContent = passed + "/" + marks.length + " passed";
    td.replaceChildren(mark);
    if (passed && failed) {
      const flaky = document.createElement("span");
      flaky.className = "flaky";
      flaky.textContent = " flaky";
      td.append(flaky);
    }
    const letters = document.createElement("span");
    letters.className = "epochs";
    letters.textContent = " " + marks.join("");
    const line = document.createElement("div");
    line.className = "line";
    line.textContent = row.line;
    td.append(letters, line);
  }

  function liveRun() {
    const body = document.body;
    const epochs = Number(body.dataset.epochs || "1");
    if (body.dataset.live !== "yes") { body.dataset.ready = "1"; return; }
    const runId = body.dataset.run;
    const cells = new Map();
    for (const td of document.querySelectorAll("#grid td.cell")) {
      cells.set(td.dataset.key + "\u0000" + td.dataset.model, td);
    }
    const seen = new Set();
    let applied = 0;
    const source = new EventSource("/live/runs/" + encodeURIComponent(runId) + "?after=" + encodeURIComponent(body.dataset.cursor || "0"));
    source.addEventListener("update", (event) => {
      const data = JSON.parse(event.data);
      const s = data.state;
      const progress = document.getElementById("run-progress");
      if (progress) { progress.max = s.expected; progress.value = s.persisted; }
      setText("run-count", s.persisted + "/" + s.expected);
      setText("n-passed", s.passed); setText("n-failed", s.failed); setText("n-errored", s.errored);
      const badge = document.getElementById("run-status");
      if (badge) { badge.textContent = s.status; badge.className = "badge s-" + s.status; }
      for (const row of data.rows) {
        if (seen.has(row.id)) continue;  // a row the page already applied (a reconnect re-reads from its cursor)
        seen.add(row.id);
        applied += 1;
        const td = cells.get(row.key + "\u0000" + row.model);
        if (!td) continue;
        if (epochs > 1) { epochCell(td, row); continue; }
        td.className = "cell fresh st-" + row.status;
        const mark = document.createElement("span");
        mark.className = "mark";
        mark.textContent = row.status;
        const line = document.createElement("div");
        line.className = "line";
        line.textContent = row.line;
        td.replaceChildren(mark);
        if (row.fault) {
          const fault = document.createElement("span");
          fault.className = "fault";
          fault.textContent = " " + row.fault;
          td.append(fault);
        }
        td.append(line);
      }
      body.dataset.persisted = String(s.persisted);
      body.dataset.applied = String(applied);
    });
    source.addEventListener("done", () => {
      source.close();
      body.dataset.finished = "1";
      window.location.reload();  // the finished run's page: its report, verdict and charts
    });
    source.addEventListener("gone", () => source.close());
    body.dataset.ready = "1";
  }

  function liveRuns() {
    const table = document.getElementById("runs");
    const ids = (table && table.dataset.live || "").split(" ").filter(Boolean);
    document.body.dataset.ready = "1";
    if (!ids.length) return;
    const query = ids.map((id) => "id=" + encodeURIComponent(id)).join("&");
    const source = new EventSource("/live/runs?" + query);
    const rows = new Map();
    for (const tr of table.querySelectorAll("tr[data-run]")) rows.set(tr.dataset.run, tr);
    source.addEventListener("runs", (event) => {
      const states = JSON.parse(event.data);
      for (const [id, s] of Object.entries(states)) {
        const tr = rows.get(id);
        if (!tr) continue;
        const bar = tr.querySelector('[data-field="progress"]');
        if (bar) { bar.max = s.expected; bar.value = s.persisted; }
        const count = tr.querySelector('[data-field="count"]');
        if (count) count.textContent = s.persisted + "/" + s.expected;
        const status = tr.querySelector('[data-field="status"]');
        if (status) { status.textContent = s.status; status.className = "badge s-" + s.status; }
      }
    });
    source.addEventListener("done", () => source.close());
  }

  function liveFleet() {
    const target = document.getElementById("fleet");
    const source = new EventSource("/live/fleet");
    let updates = 0;
    source.addEventListener("fleet", (event) => {
      target.innerHTML = JSON.parse(event.data).html;  // rendered and escaped by the server's templates
      updates += 1;
      document.body.dataset.updates = String(updates);
    });
    document.body.dataset.ready = "1";
  }

  if (page === "run") liveRun();
  else if (page === "runs") liveRuns();
  else if (page === "fleet") liveFleet();
  else document.body.dataset.ready = "1";
})();
