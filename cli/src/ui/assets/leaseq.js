// leaseq ui: the one script, compiled into the binary. Every page works without it.
"use strict";
// JSON editors: say whether the document parses as it is typed (the server checks again).
document.querySelectorAll("textarea[data-json]").forEach(function (area) {
  var status = area.parentElement.querySelector(".json-status");
  function check() {
    try {
      JSON.parse(area.value);
      area.classList.remove("invalid");
      area.setCustomValidity("");
      if (status) { status.textContent = "valid JSON"; status.classList.remove("invalid"); }
    } catch (e) {
      area.classList.add("invalid");
      area.setCustomValidity("not valid JSON: " + e.message);
      if (status) { status.textContent = "not valid JSON: " + e.message; status.classList.add("invalid"); }
    }
  }
  area.addEventListener("input", check);
  check();
});
// The overview: reload its numbers when a queue is notified (enqueue, resume), and every 10 s
// for what is not notified (completions, failures). At most one reload a second.
(function () {
  var live = document.querySelector("[data-live]");
  if (!live || !window.fetch) return;
  var last = 0, pending = false;
  function reload() {
    var now = Date.now();
    if (pending || now - last < 1000) return;
    pending = true; last = now;
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("[data-live]");
        if (fresh) live.innerHTML = fresh.innerHTML;
      })
      .catch(function () {})
      .then(function () { pending = false; });
  }
  if (window.EventSource) new EventSource("/events").addEventListener("change", reload);
  setInterval(reload, 10000);
})();
