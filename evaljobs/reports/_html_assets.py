"""The HTML report's inline CSS and JavaScript (kept apart from the Python that writes the page).

The report is one self-contained file, so both travel inline; the script is
allowed by its hash in the page's Content-Security-Policy (``evaljobs.reports.html``).
The script builds a pair's detail panel with ``textContent`` only.
"""
from __future__ import annotations

STYLE = """
:root{--p:#1a7f37;--pb:#dafbe1;--f:#b35900;--fb:#fff1e0;--e:#8250df;--eb:#f3ebff;--g:#57606a;--line:#d0d7de}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328}
main{padding:16px 24px;max-width:100%}
h1{font-size:20px;margin:0 0 8px}
h2{font-size:16px;margin:20px 0 8px}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0}
.facts dt{color:var(--g)}
.facts dd{margin:0;overflow-wrap:anywhere}
table.data{border-collapse:collapse}
table.data th,table.data td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;
vertical-align:top}
.n{text-align:right!important;font-variant-numeric:tabular-nums}
.t{color:var(--g)}
#grid{border-collapse:collapse;font-size:12px}
#grid th{text-align:left;font-weight:normal;padding:1px 6px;white-space:nowrap;max-width:260px;
overflow:hidden;text-overflow:ellipsis}
#grid thead th{position:sticky;top:0;background:#fff;font-weight:600}
#grid th.m span{display:inline-block;max-width:120px;overflow:hidden;text-overflow:ellipsis;
vertical-align:bottom}
#grid td{padding:0;border:1px solid #fff;min-width:44px;text-align:center}
#grid td a{display:block;padding:1px 4px;color:inherit;text-decoration:none}
#grid td.p{background:var(--pb);color:var(--p)}
#grid td.f{background:var(--fb);color:var(--f)}
#grid td.e{background:var(--eb);color:var(--e)}
#grid td.x{color:var(--g)}
#grid td.k a{font-style:italic;text-decoration:underline dotted}
#grid td.sel{outline:2px solid #0969da}
.c{padding:0 6px;border-radius:3px}
.c.p{background:var(--pb);color:var(--p)}
.c.f{background:var(--fb);color:var(--f)}
.c.e{background:var(--eb);color:var(--e)}
.legend{color:var(--g)}
.k-regressed{color:#cf222e;font-weight:600}
.k-fixed{color:var(--p);font-weight:600}
.errors{background:#ffebe9;color:#cf222e;margin:0;padding:8px 32px}
#panel{position:fixed;top:0;right:0;bottom:0;width:min(640px,100%);overflow:auto;background:#fff;
border-left:1px solid var(--line);box-shadow:-4px 0 16px rgba(0,0,0,.12);padding:16px 20px}
#close{position:absolute;top:8px;right:14px;font-size:22px;text-decoration:none;color:var(--g)}
#panel h2{margin-top:0;padding-right:24px;overflow-wrap:anywhere}
#panel h3{font-size:14px;margin:16px 0 6px}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f8fa;padding:6px 8px;margin:2px 0;
font-size:12px}
pre.error{background:#ffebe9}
.msg{border-left:3px solid var(--line);padding:2px 8px;margin:6px 0}
.msg .role{font-weight:600;color:var(--g)}
.msg.user{border-color:#0969da}
.msg.assistant{border-color:var(--p)}
.msg.tool,.msg.call{border-color:var(--e)}
.badge{font-weight:600}
.badge.passed{color:var(--p)}
.badge.failed{color:var(--f)}
.badge.errored{color:var(--e)}
.bar{display:inline-block;height:8px;background:var(--p);vertical-align:middle;margin-left:6px}
.note{color:var(--g)}
@media (min-width:1100px){body.open main{margin-right:640px}}
"""

SCRIPT = """
(function () {
  "use strict";
  var body = document.body;
  var errors = document.getElementById("errors");
  function report(text) {
    var li = document.createElement("li");
    li.textContent = text;
    errors.appendChild(li);
    errors.hidden = false;
    body.setAttribute("data-errors", String(errors.children.length));
  }
  window.addEventListener("error", function (event) { report("report script error: " + event.message); });
  var data = JSON.parse(document.getElementById("pairs").textContent);
  var pairs = data.pairs;
  var texts = data.texts;
  var panel = document.getElementById("panel");
  var content = document.getElementById("panel-body");
  var selected = null;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function show(value) {
    if (value === null || value === undefined) { return ""; }
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }
  function add(parent, child) { parent.appendChild(child); return child; }
  function facts(parent, items) {
    var dl = add(parent, el("dl", "facts"));
    items.forEach(function (item) {
      if (item[1] === null || item[1] === undefined || item[1] === "") { return; }
      add(dl, el("dt", null, item[0]));
      var dd = add(dl, el("dd"));
      var plain = typeof item[1] === "string" || typeof item[1] === "number";
      add(dd, plain ? document.createTextNode(String(item[1])) : el("pre", null, show(item[1])));
    });
  }
  function grades(root, p) {
    var names = Object.keys(p.scores || {}).sort();
    if (names.length) {
      add(root, el("h3", null, "Grades"));
      var table = add(root, el("table", "data"));
      names.forEach(function (name) {
        var tr = add(table, el("tr"));
        add(tr, el("td", null, name));
        var td = add(tr, el("td", "n", Number(p.scores[name]).toFixed(3)));
        var bar = add(td, el("span", "bar"));
        bar.style.width = Math.round(60 * Number(p.scores[name])) + "px";
      });
    }
    var keys = Object.keys(p.grades || {}).sort();
    if (keys.length) {
      add(root, el("h3", null, "Grader details"));
      facts(root, keys.map(function (k) { return [k.replace(/_/g, " "), p.grades[k]]; }));
    }
  }
  function toolCalls(root, calls) {
    if (!calls || !calls.length) { return; }
    add(root, el("h3", null, "Tool calls (" + calls.length + ")"));
    calls.forEach(function (call, n) {
      var box = add(root, el("div", "msg call"));
      var ms = call.duration_ms === null || call.duration_ms === undefined ? "" :
        " · " + Number(call.duration_ms).toFixed(1) + " ms";
      add(box, el("div", "role", (n + 1) + ". " + show(call.name) + ms));
      add(box, el("pre", null, "arguments: " + show(call.arguments === undefined ? {} : call.arguments)));
      add(box, call.error ? el("pre", "error", "error: " + show(call.error)) :
        el("pre", null, "result: " + show(call.result === undefined ? null : call.result)));
    });
  }
  function conversation(root, messages) {
    if (!messages || !messages.length) { return; }
    add(root, el("h3", null, "Conversation (" + messages.length + " messages)"));
    messages.forEach(function (m) {
      var box = add(root, el("div", "msg " + String(m.role || "")));
      var role = String(m.role || "?") + (m.name ? " " + m.name : "") +
        (m.tool_call_id ? " (result of " + m.tool_call_id + ")" : "");
      add(box, el("div", "role", role));
      var text = m.ref !== undefined ? texts[m.ref] : m.content;
      if (text !== null && text !== undefined && text !== "") {
        add(box, el("pre", "content", show(text)));
      }
      (Array.isArray(m.tool_calls) ? m.tool_calls : []).forEach(function (call) {
        var fn = call && call["function"] ? call["function"] : call || {};
        add(box, el("pre", "call", "→ " + show(fn.name) + "(" + show(fn.arguments) + ")"));
      });
    });
  }
  function render(p) {
    var root = el("div");
    add(root, el("h2", null, p.key + " × " + p.model));
    var line = add(root, el("p"));
    add(line, el("span", "badge " + p.status, p.status));
    add(line, document.createTextNode(" · score " + Number(p.score).toFixed(3) +
      (p.fault ? " · fault " + p.fault : "") + (p.cached ? " · cached replay" : "")));
    if (p.baseline) {
      add(root, el("p", "k-" + p.baseline.kind, "baseline: " + p.baseline.status + " → " + p.status +
        (p.baseline.kind === "same" ? "" : " (" + p.baseline.kind + ")")));
    }
    if (p.error) { add(root, el("pre", "error", p.error)); }
    facts(root, [["Duration", p.duration_ms + " ms"], ["Tokens", p.input_tokens === undefined ? null :
      p.input_tokens + " in / " + p.output_tokens + " out"],
      ["Cost", p.cost === null || p.cost === undefined ? "unknown" : "$" + Number(p.cost).toFixed(6)],
      ["Attempts", p.attempts], ["Turns", p.turns], ["Meta", p.meta]]);
    grades(root, p);
    toolCalls(root, p.tool_calls);
    conversation(root, p.messages);
    if (p.output) {
      add(root, el("h3", null, "Answer"));
      add(root, el("pre", "answer", p.output));
    }
    if (p.messages === undefined) {
      add(root, el("p", "note", "This report was rendered without the run's result rows: no conversation."));
    }
    return root;
  }
  function cellOf(i) {
    var link = document.querySelector('#grid a[href="#p' + i + '"]');
    return link ? link.parentNode : null;
  }
  function close() {
    panel.hidden = true;
    body.classList.remove("open");
    panel.removeAttribute("data-pair");
    if (selected) { selected.classList.remove("sel"); selected = null; }
  }
  function open(i) {
    while (content.firstChild) { content.removeChild(content.firstChild); }
    content.appendChild(render(pairs[i]));
    panel.hidden = false;
    body.classList.add("open");
    panel.setAttribute("data-pair", String(i));
    if (selected) { selected.classList.remove("sel"); }
    selected = cellOf(i);
    if (selected) { selected.classList.add("sel"); }
    panel.scrollTop = 0;
  }
  function fromHash() {
    var match = /^#p(\\d+)$/.exec(window.location.hash);
    if (match && pairs[Number(match[1])]) { open(Number(match[1])); } else { close(); }
  }
  window.addEventListener("hashchange", fromHash);
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && !panel.hidden) { window.location.hash = ""; }
  });
  fromHash();
  body.setAttribute("data-ready", String(pairs.length));
})();
"""

__all__ = ["STYLE", "SCRIPT"]
