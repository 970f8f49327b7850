// Keeps the header badge current from GET /api/notifications/summary: on load, when the
// tab becomes visible, and every 60 s only while it is visible, so a hundred background
// tabs do not poll (§9.2). The summary answers 304 when nothing changed; the browser
// revalidates with its ETag by itself.
(function () {
  "use strict";
  var badge = document.querySelector(".wn-badge");
  if (!badge || !window.fetch) return;
  var count = badge.querySelector(".wn-badge-count");
  var INTERVAL = 60000;

  function show(summary) {
    count.textContent = summary.unreadLabel;
    count.hidden = !summary.unread;
    badge.hidden = !summary.enabled;
    badge.setAttribute("aria-label", summary.unread
      ? badge.getAttribute("data-label-some").replace("{count}", summary.unreadLabel)
      : badge.getAttribute("data-label-none"));
  }

  function refresh() {
    fetch(badge.getAttribute("data-summary-url"), {
      credentials: "same-origin",
      headers: { "Accept": "application/json" },
    }).then(function (response) {
      return response.ok ? response.json() : null;
    }).then(function (summary) {
      if (summary) show(summary);
    }).catch(function () { /* offline: keep what is shown */ });
  }

  refresh();
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") refresh();
  });
  setInterval(function () {
    if (document.visibilityState === "visible") refresh();
  }, INTERVAL);
})();
