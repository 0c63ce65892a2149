// evaljobs view: the review queue. A label is sent as JSON with the page's CSRF token (from its <meta>);
// what comes back is only ever set as text (textContent), never parsed as HTML.
"use strict";
(function () {
  const body = document.body;
  const items = Array.from(document.querySelectorAll("#queue > li.pair"));
  const meta = document.querySelector('meta[name="csrf"]');
  const writable = body.dataset.write === "yes" && meta;
  const who = document.getElementById("reviewer");
  let current = -1;

  if (who) {
    who.value = localStorage.getItem("evaljobs.reviewer") || "";
    who.addEventListener("change", () => localStorage.setItem("evaljobs.reviewer", who.value.trim()));
  }

  function focus(index) {
    if (!items.length) return;
    current = Math.max(0, Math.min(items.length - 1, index));
    for (const li of items) li.classList.remove("current");
    const li = items[current];
    li.classList.add("current");
    li.focus({ preventScroll: true });
    li.scrollIntoView({ block: "nearest" });
    body.dataset.current = String(current);
  }

  function show(li, label) {
    const state = li.querySelector('[data-field="label"]');
    const badge = document.createElement("span");
    badge.className = "badge h-" + label.verdict;
    badge.textContent = "human: " + label.verdict;
    const rest = document.createTextNode(
      (label.score === null ? "" : " score " + Number(label.score).toFixed(2)) + " by ");
    const name = document.createElement("span");
    name.className = "who";
    name.textContent = label.reviewer;
    const when = document.createTextNode(" at " + String(label.created_at || "").slice(0, 19));
    state.replaceChildren(badge, rest, name, when);
    if (label.comment) {
      const note = document.createElement("div");
      note.className = "comment";
      note.textContent = label.comment;
      state.append(note);
    }
    li.classList.add("labelled");
    li.dataset.verdict = label.verdict;
  }

  async function save(li, verdict) {
    const said = li.querySelector(".saved");
    const score = li.querySelector(".score").value;
    const comment = li.querySelector(".comment-in").value;
    said.textContent = "saving…";
    const response = await fetch("/runs/" + encodeURIComponent(body.dataset.run) + "/labels", {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": meta.content },
      body: JSON.stringify({
        scenario_key: li.dataset.key, model: li.dataset.model, epoch: Number(li.dataset.epoch),
        verdict: verdict, score: score === "" ? null : Number(score), comment: comment,
        reviewer: who ? who.value.trim() : "",
      }),
    });
    const answer = await response.json().catch(() => ({ error: "HTTP " + response.status }));
    if (!response.ok) {
      said.textContent = "not saved: " + (answer.error || response.status);
      return false;
    }
    show(li, answer);
    said.textContent = "saved";
    const done = document.getElementById("labelled");
    if (done) done.textContent = String(document.querySelectorAll("#queue > li.labelled").length);
    body.dataset.saved = String(Number(body.dataset.saved || "0") + 1);
    return true;
  }

  async function act(li, verdict) {
    if (!writable) return;
    const index = items.indexOf(li);
    if (await save(li, verdict) && index === current) focus(current + 1);
  }

  for (const li of items) {
    li.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-act]");
      focus(items.indexOf(li));
      if (button) act(li, button.dataset.act);
    });
    const comment = li.querySelector(".comment-in");
    if (comment) {
      comment.addEventListener("keydown", (event) => {
        if (event.key === "Enter") {
          event.preventDefault();
          act(li, li.dataset.verdict || li.dataset.machine);
        } else if (event.key === "Escape") {
          li.focus();
        }
      });
    }
  }

  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input, textarea, select") || event.ctrlKey || event.metaKey || event.altKey) return;
    const li = items[current];
    if (event.key === "j" || event.key === "n" || event.key === "ArrowDown") focus(current + 1);
    else if (event.key === "k" || event.key === "ArrowUp") focus(current - 1);
    else if (event.key === "p" && li) act(li, "pass");
    else if (event.key === "f" && li) act(li, "fail");
    else if (event.key === "c" && li && writable) {
      event.preventDefault();
      li.querySelector(".comment-in").focus();
    } else return;
    event.preventDefault();
  });

  focus(0);
  body.dataset.reviewReady = "1";
})();
