// What every page script shares, written once (loaded before them by base.html):
// EDT.csrf(), the session's CSRF token; EDT.api(method, url, body), a same-origin request
// (JSON in when body is given, JSON out), answering { ok, status, data } and saying in
// words when the server does not answer; EDT.live(path, handlers), the page's WebSocket
// to the live process, opened again after a close with a delay doubling from 0.5 s to 10 s;
// EDT.ready(form), called once a form's script handles its submit: its buttons marked
// data-until-script are enabled (until then a click, or Enter in a field, sends nothing:
// such a form has no server-side handler, and a password must never go into a URL).
(function () {
  "use strict";
  function csrf() {
    const m = document.cookie.match(/csrftoken=([^;]+)/);
    return m ? m[1] : "";
  }
  async function api(method, url, body) {
    const init = { method, credentials: "same-origin", headers: { "X-CSRFToken": csrf() } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let r;
    try {
      r = await fetch(url, init);
    } catch (e) {
      return { ok: false, status: 0, data: { error: "the server does not answer: " + e.message } };
    }
    const data = r.status === 204 ? {} : await r.json().catch(() => ({ error: "HTTP " + r.status }));
    return { ok: r.ok, status: r.status, data };
  }
  // handlers: open() after each (re)connection, message(data) for each JSON message,
  // closed() when the socket closed (it opens again by itself).
  function live(path, handlers) {
    let retryMs = 500;
    function connect() {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      const port = document.body.dataset.livePort; // live updates may come from a process of their own
      const ws = new WebSocket(scheme + (port ? location.hostname + ":" + port : location.host) + path);
      ws.onopen = () => { retryMs = 500; if (handlers.open) handlers.open(); };
      ws.onmessage = (msg) => handlers.message(JSON.parse(msg.data));
      ws.onclose = () => {
        if (handlers.closed) handlers.closed();
        setTimeout(connect, retryMs);
        retryMs = Math.min(retryMs * 2, 10000);
      };
    }
    connect();
  }
  function ready(form) {
    for (const b of form.querySelectorAll("[data-until-script]")) {
      b.removeAttribute("data-until-script");
      b.disabled = false;
    }
  }
  window.EDT = Object.assign(window.EDT || {}, { csrf, api, live, ready });
})();
