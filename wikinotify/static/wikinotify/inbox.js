// The open inbox shows new entries at the top without a reload: when the badge script
// hears that the inbox changed (its "wikinotify:summary" event, with a latestAt or an
// unread count other than the last one), this fetches the list again, rendered by the
// server, and swaps it in. The first summary is compared with the one the page was drawn
// with (data-drawn-with), so an entry written before the stream connected is shown too.
// Only on the first page: an older page stays as it was.
(function () {
  "use strict";
  var days = document.querySelector(".wn-days[data-entries-url]");
  if (!days || !window.fetch) return;
  function version(summary) { return summary.latestAt + " " + summary.unread; }
  var latest = version(JSON.parse(days.getAttribute("data-drawn-with")));

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
        days.querySelectorAll(".wn-entry").forEach(function (li) {
          if (!before[li.dataset.id]) li.classList.add("wn-new");
        });
      })
      .catch(function () { /* offline: keep what is shown */ });
  }

  document.addEventListener("wikinotify:summary", function (event) {
    var changed = version(event.detail);
    if (changed !== latest) reload();
    latest = changed;
  });
})();
