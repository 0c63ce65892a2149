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

  // The run's cost as the server writes it (reports' rule: "$X", "≥ $X (N unknown)", "unknown"), kept
  // up to date from each new row's cost while the run is live.
  function money(value) {
    return value < 1 ? "$" + value.toFixed(4)
      : "$" + value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }

  function addCost(cost) {
    const node = document.getElementById("run-cost");
    if (!node) return;
    let total = Number(node.dataset.total || "0"), unknown = Number(node.dataset.unknown || "0");
    if (cost === null || cost === undefined) unknown += 1; else total += Number(cost);
    node.dataset.total = String(total);
    node.dataset.unknown = String(unknown);
    node.textContent = unknown ? (total ? "≥ " + money(total) + " (" + unknown + " unknown)" : "unknown")
      : money(total);
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
        addCost(row.cost);
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

  // Phones: a table with data-key-cols shows those columns (1-based) and hides the rest behind "more".
  function keyColumns() {
    for (const table of document.querySelectorAll("table[data-key-cols]")) {
      const keep = new Set(table.dataset.keyCols.split(",").map(Number));
      for (const row of table.rows) {
        let column = 0;
        for (const cell of row.cells) {
          column += 1;
          if (cell.colSpan > 1) { column += cell.colSpan - 1; continue; }
          if (!keep.has(column)) cell.classList.add("x");
        }
      }
      const button = document.createElement("button");
      button.type = "button";
      button.className = "more-cols";
      button.textContent = "more columns";
      button.setAttribute("aria-expanded", "false");
      button.addEventListener("click", () => {
        const open = table.classList.toggle("show-more");
        button.textContent = open ? "fewer columns" : "more columns";
        button.setAttribute("aria-expanded", String(open));
      });
      table.after(button);
    }
  }
  keyColumns();

  if (page === "run") liveRun();
  else if (page === "runs") liveRuns();
  else if (page === "fleet") liveFleet();
  else document.body.dataset.ready = "1";
})();
