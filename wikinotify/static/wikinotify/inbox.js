// The open inbox shows new entries at the top without a reload: when the badge script
// hears that the inbox changed (its "wikinotify:summary" event, with a latestAt or an
// unread count other than the last one), this fetches the list again, rendered by the
// server, and swaps it in. The first summary is compared with the one the page was drawn
// with (data-drawn-with), so an entry written before the stream connected is shown too.
// Only on the first page: an older page stays as it was.
(function () {
  "use strict";
  var days = document.querySelector(".wn-days");
  if (!days || !window.fetch) return;
  var reloads = days.hasAttribute("data-entries-url");  // the first page only
  function version(summary) { return summary.latestAt + " " + summary.unread; }
  var latest = reloads && version(JSON.parse(days.getAttribute("data-drawn-with")));

  function known() {
    var ids = {};
    days.querySelectorAll(".wn-entry").forEach(function (li) { ids[li.dataset.id] = true; });
    return ids;
  }

  function reload() {
    var before = known();
    fetch(days.getAttribute("data-entries-url"), { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) return;
        days.innerHTML = html;
        showMuteButtons();
        days.querySelectorAll(".wn-entry").forEach(function (li) {
          if (!before[li.dataset.id]) li.classList.add("wn-new");
        });
      })
      .catch(function () { /* offline: keep what is shown */ });
  }

  // "Mute this page" / "Mute <person>" on each row: PUT /api/mutes, then the button says
  // so. Hidden without JavaScript (they have no form to fall back on).
  function showMuteButtons() {
    days.querySelectorAll(".wn-mute[hidden]").forEach(function (b) { b.hidden = false; });
  }
  showMuteButtons();
  days.addEventListener("click", function (event) {
    var button = event.target.closest("button.wn-mute");
    if (!button || button.getAttribute("aria-disabled") === "true") return;
    var csrf = days.querySelector("input[name=csrf_token]");
    var headers = { "Accept": "application/json", "Content-Type": "application/json" };
    if (csrf) headers["X-CSRFToken"] = csrf.value;
    fetch(button.dataset.url, {
      method: "PUT", credentials: "same-origin", headers: headers,
      body: JSON.stringify({ kind: button.dataset.kind, id: button.dataset.id })
    }).then(function (response) {
      if (!response.ok) return;
      button.textContent = button.dataset.done;
      button.setAttribute("aria-disabled", "true");  // kept focusable: focus stays put
    }).catch(function () { /* offline: the button stays as it was */ });
  });

  document.addEventListener("wikinotify:summary", function (event) {
    if (!reloads) return;
    var changed = version(event.detail);
    if (changed !== latest) reload();
    latest = changed;
  });
})();
