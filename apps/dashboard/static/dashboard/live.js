// Gryvia dashboard: live job views (docs/dashboard.md, "Live views"). A static file: the site's CSP forbids inline
// scripts and eval, so htmx is driven from here (htmx.ajax), never through hx-trigger filter expressions.
"use strict";
(() => {
  const POLL_MS = 3000; // the fallback's period while the socket is down
  const THROTTLE_MS = 1000; // at most one refresh a second per region, however many events arrive
  const BACKOFF_MAX_MS = 30000;

  // One /ws/events/ socket per page, authenticated by the session cookie the browser sends with the handshake.
  // `targets`: the subscribe messages; `onEvent(event)`; `onState(live)`: true once subscribed, false when down.
  function liveSocket(targets, onEvent, onState) {
    let attempt = 0;
    const connect = () => {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      let ws;
      try {
        ws = new WebSocket(`${scheme}//${location.host}/ws/events/`);
      } catch (err) {
        retry();
        return;
      }
      ws.addEventListener("open", () => {
        for (const target of targets) ws.send(JSON.stringify({ action: "subscribe", ...target }));
      });
      ws.addEventListener("message", (message) => {
        let data;
        try {
          data = JSON.parse(message.data);
        } catch (err) {
          return;
        }
        if (data.type === "subscribed") {
          attempt = 0;
          onState(true);
        } else if (data.type === "event") {
          onEvent(data);
        } else if (data.type === "error") {
          onState(false); // refused (e.g. the job is gone): the polling fallback keeps the page honest
        }
      });
      ws.addEventListener("close", () => {
        onState(false);
        retry();
      });
    };
    const retry = () => {
      // Exponential backoff with jitter, so a restarted server is not met by every open page at once.
      const delay = Math.min(BACKOFF_MAX_MS, 1000 * 2 ** attempt) * (0.5 + Math.random() / 2);
      attempt += 1;
      setTimeout(connect, delay);
    };
    connect();
  }

  // Refresh a region through htmx: coalesced (one request in flight, one more queued) and throttled.
  function refresher(url, target, swap) {
    let busy = false;
    let again = false;
    const run = () => {
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      const u = typeof url === "function" ? url() : url;
      htmx.ajax("GET", u, { target, swap }).finally(() =>
        setTimeout(() => {
          busy = false;
          if (again) {
            again = false;
            run();
          }
        }, THROTTLE_MS),
      );
    };
    return run;
  }

  // Live while the socket is subscribed; polling (htmx, every POLL_MS) while it is not. On each return to live the
  // region is fetched once, for whatever changed while the socket was down.
  function liveRegion(targets, matches, refresh, stateEl) {
    let timer = null;
    liveSocket(
      targets,
      (event) => {
        if (matches(event)) refresh();
      },
      (live) => {
        if (stateEl) {
          stateEl.hidden = live;
          stateEl.textContent = live ? "" : "Live updates interrupted: refreshing every few seconds.";
        }
        if (live && timer !== null) {
          clearInterval(timer);
          timer = null;
          refresh();
        } else if (!live && timer === null) {
          timer = setInterval(refresh, POLL_MS);
        }
      },
    );
  }

  function jobStatus() {
    const region = document.getElementById("job-status");
    if (!region || typeof htmx === "undefined") return;
    const name = region.dataset.liveJob;
    const refresh = refresher(region.dataset.statusUrl, region, "innerHTML");
    liveRegion(
      [{ kind: "job", id: name }],
      (event) => event.kind === "job" && event.id === name,
      refresh,
      document.querySelector("[data-live-state]"),
    );
  }

  function jobList() {
    const marker = document.getElementById("jobs-live");
    if (!marker || typeof htmx === "undefined") return;
    // The page's own URL carries the filters and page (hx-push-url), so the refreshed table keeps them.
    const refresh = refresher(() => location.pathname + location.search, "#job-table", "outerHTML");
    liveRegion([{ tenant: marker.dataset.liveTenant }], (event) => event.kind === "job", refresh, null);
  }

  // The log tail: follow the text/plain stream, keep the last N lines, pause, resume from where it is.
  function logTail() {
    const box = document.getElementById("job-log");
    if (!box || !window.fetch || !window.TextDecoder) return;
    const max = Number(box.dataset.maxLines) || 1000;
    const out = box.querySelector("[data-log-lines]");
    const pre = out.parentElement;
    const state = box.querySelector("[data-log-state]");
    const pause = box.querySelector("[data-log-pause]");
    let lines = [];
    let paused = false;
    let attempt = 0;
    const render = () => {
      if (paused) return;
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      out.textContent = lines.join("\n"); // text, never HTML: a log line is untrusted
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    };
    pause.hidden = false;
    pause.addEventListener("click", () => {
      paused = !paused;
      pause.textContent = paused ? "Resume" : "Pause";
      pause.setAttribute("aria-pressed", String(paused));
      render();
    });
    const follow = async () => {
      state.textContent = "Following…";
      let partial = "";
      try {
        const response = await fetch(`${box.dataset.logUrl}?follow=1&tail=${max}`, { credentials: "same-origin" });
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        // A (re)connection starts again from the last N lines: replace, do not append twice.
        lines = [];
        attempt = 0;
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          const parts = (partial + decoder.decode(value, { stream: true })).split("\n");
          partial = parts.pop();
          lines.push(...parts);
          if (lines.length > max) lines = lines.slice(-max);
          render();
        }
        if (partial) lines.push(partial);
        render();
        state.textContent = "The job has ended: this is its whole log tail.";
      } catch (err) {
        const delay = Math.min(BACKOFF_MAX_MS, 1000 * 2 ** attempt);
        attempt += 1;
        state.textContent = `Log stream interrupted; retrying in ${Math.round(delay / 1000)} s.`;
        setTimeout(follow, delay);
      }
    };
    follow();
  }

  // A session that ended answers a refresh with the login page (tenant_page's redirect, followed by the XHR): go
  // there as a whole page, with its ?next=, instead of swapping a login form into the status region or the table.
  function loginOnExpiry() {
    document.body.addEventListener("htmx:beforeSwap", (event) => {
      const url = event.detail.xhr && event.detail.xhr.responseURL;
      if (url && new URL(url).pathname === "/login/") {
        event.detail.shouldSwap = false;
        location.assign(url);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    loginOnExpiry();
    jobStatus();
    jobList();
    logTail();
  });
})();
