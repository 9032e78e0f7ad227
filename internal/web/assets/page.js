// The operator's page: swaps in the content the server sends on /events,
// filters rows, answers asks without leaving the page, and keeps "since"
// ages current. No framework, no build step.
"use strict";
(function () {
  const content = document.getElementById("content");
  const filter = document.getElementById("filter");
  const live = document.getElementById("live");
  const said = document.getElementById("said");

  function applyFilter() {
    const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    for (const row of content.querySelectorAll("tr.row")) {
      const text = row.textContent.toLowerCase();
      row.classList.toggle("hidden", !words.every((w) => text.includes(w)));
    }
    for (const node of content.querySelectorAll("div.node")) {
      node.classList.toggle("hidden", node.querySelector("tr.row:not(.hidden)") === null);
    }
  }

  function age(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 48 * 3600) return Math.floor(s / 3600) + "h";
    return Math.floor(s / 86400) + "d";
  }

  function refreshAges() {
    const now = Date.now();
    for (const t of content.querySelectorAll("td > time[datetime]")) {
      const at = Date.parse(t.getAttribute("datetime"));
      if (!isNaN(at) && at > 0) t.textContent = age(now - at);
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

  filter.addEventListener("input", applyFilter);

  function connect() {
    const es = new EventSource("/events?v=" + encodeURIComponent(content.dataset.version || "0"));
    es.addEventListener("open", () => { live.textContent = "live"; live.className = "live on"; });
    es.addEventListener("error", () => { live.textContent = "reconnecting…"; live.className = "live off"; });
    es.addEventListener("content", (ev) => {
      const nl = ev.data.indexOf("\n");
      content.dataset.version = ev.data.slice(0, nl);
      content.innerHTML = ev.data.slice(nl + 1);
      applyFilter();
      refreshAges();
    });
  }
  connect();
  setInterval(refreshAges, 15000);
})();
