// The operator's page: applies the deltas the server sends on /events for
// this view (a part or a row replaced by its data-id, or the whole view),
// answers asks without leaving the page, and keeps "since" ages current.
// No framework, no build step.
"use strict";
(function () {
  const content = document.getElementById("content");
  const live = document.getElementById("live");
  const said = document.getElementById("said");

  function age(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 48 * 3600) return Math.floor(s / 3600) + "h";
    return Math.floor(s / 86400) + "d";
  }

  // Rows carry absolute times (so that a row's HTML changes only when the
  // row does); the page shows them as ages, and expiries as "in 6d".
  function refreshAges() {
    const now = Date.now();
    for (const t of content.querySelectorAll("time.ago[datetime], time.until[datetime]")) {
      const at = Date.parse(t.getAttribute("datetime"));
      if (isNaN(at) || at <= 0) continue;
      t.title = t.getAttribute("datetime");
      if (t.classList.contains("ago")) t.textContent = age(now - at);
      else t.textContent = at <= now ? "due" : "in " + age(at - now);
    }
  }

  function say(text, isError) {
    said.textContent = text;
    said.classList.toggle("error", !!isError);
    said.hidden = false;
  }

  // Answers: the form's own POST, sent with fetch so that the page stays.
  content.addEventListener("submit", async (ev) => {
    const form = ev.target;
    if (!form.classList.contains("answer")) return;
    ev.preventDefault();
    const data = new FormData(form, ev.submitter);
    for (const b of form.querySelectorAll("button")) b.disabled = true;
    try {
      const resp = await fetch(form.action, { method: "POST", body: new URLSearchParams(data), credentials: "same-origin" });
      say(await resp.text(), !resp.ok);
      if (!resp.ok) for (const b of form.querySelectorAll("button")) b.disabled = false;
    } catch (err) {
      say("the answer did not reach the page's server: " + err, true);
      for (const b of form.querySelectorAll("button")) b.disabled = false;
    }
  });

  // apply takes one delta: the whole view, or parts and rows by data-id.
  function apply(d) {
    content.dataset.version = String(d.v);
    if (d.content) {
      content.innerHTML = d.content;
    }
    for (const p of d.parts || []) {
      const el = content.querySelector('[data-id="' + CSS.escape(p.id) + '"]');
      if (el) el.outerHTML = p.html;
    }
    window.deltas = (window.deltas || 0) + 1;
    refreshAges();
  }

  function connect() {
    const params = new URLSearchParams(location.search);
    params.set("v", content.dataset.version || "0");
    const es = new EventSource("/events?" + params.toString());
    es.addEventListener("open", () => { live.textContent = "live"; live.className = "live on"; });
    es.addEventListener("error", () => {
      live.textContent = "reconnecting…"; live.className = "live off";
      // The stream is opened again with the version the page holds now.
      es.close();
      setTimeout(connect, 2000);
    });
    es.addEventListener("delta", (ev) => apply(JSON.parse(ev.data)));
  }
  refreshAges();
  connect();
  setInterval(refreshAges, 15000);
})();
