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
  // Dismiss and Mark all as read go to the API, which answers an undo token: the page
  // says what was done and offers Undo (undo.js). Without these scripts the forms post.
  var toast = document.querySelector(".wn-inbox .wn-toast");
  var readAll = document.querySelector(".wn-inbox form.wn-read-all");
  function undoable(form, method, message, after) {
    var csrf = form.querySelector("input[name=csrf_token]");
    var headers = { "Accept": "application/json", "Content-Type": "application/json" };
    if (csrf) headers["X-CSRFToken"] = csrf.value;
    fetch(form.getAttribute("data-api"), { method: method, credentials: "same-origin",
                                           headers: headers, body: "{}" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body) { form.submit(); return; }  // let the page say what went wrong
        after();
        window.wikinotify.offerUndo(toast, toast.getAttribute("data-undo-url"), message,
                                    body.undoToken, csrf && csrf.value, reload);
      })
      .catch(function () { form.submit(); });
  }
  if (toast && window.wikinotify && window.wikinotify.offerUndo) {
    days.addEventListener("submit", function (event) {
      var form = event.target.closest("form.wn-dismiss");
      if (!form) return;
      event.preventDefault();
      undoable(form, "DELETE", toast.getAttribute("data-dismissed"), function () {
        form.closest(".wn-entry").remove();
      });
    });
    if (readAll) readAll.addEventListener("submit", function (event) {
      event.preventDefault();
      undoable(readAll, "PUT", toast.getAttribute("data-marked"), reload);
    });
  }

  document.addEventListener("wikinotify:summary", function (event) {
    if (!reloads) return;
    var changed = version(event.detail);
    if (changed !== latest) reload();
    latest = changed;
  });
})();
