// "Undo" for a few seconds after Dismiss and Mark all as read (docs/rules.md#undo), in
// the inbox and the bell menu. The region is a role="status" live region present from
// the start, so a screen reader announces what is written into it; Undo is a real
// button, reached with Tab. It stays while it has the focus or the pointer, and goes
// SHOWN ms after both have left. The token itself works for five minutes.
(function () {
  "use strict";
  var SHOWN = 10000;

  function clearLater(region) {
    clearTimeout(region.wnTimer);
    region.wnTimer = setTimeout(function () { region.textContent = ""; }, SHOWN);
  }

  function watch(region) {
    if (region.wnWatched) return;
    region.wnWatched = true;
    function hold() { clearTimeout(region.wnTimer); }
    function later() { if (region.textContent) clearLater(region); }
    region.addEventListener("focusin", hold);
    region.addEventListener("mouseenter", hold);
    region.addEventListener("focusout", later);
    region.addEventListener("mouseleave", later);
  }

  // Say `message` in `region` with an Undo button that sends `token` to `url`; `done`
  // runs once the entries are back.
  function offer(region, url, message, token, csrf, done) {
    watch(region);
    region.textContent = "";
    var text = document.createElement("span");
    text.textContent = message + " ";
    var button = document.createElement("button");
    button.type = "button";
    button.className = "wn-undo";
    button.textContent = region.getAttribute("data-undo");
    region.appendChild(text);
    region.appendChild(button);
    clearLater(region);
    button.addEventListener("click", function () {
      var headers = { "Accept": "application/json", "Content-Type": "application/json" };
      if (csrf) headers["X-CSRFToken"] = csrf;
      button.disabled = true;
      fetch(url, { method: "POST", credentials: "same-origin", headers: headers,
                   body: JSON.stringify({ token: token }) })
        .then(function (response) {
          region.textContent = response.ok ? region.getAttribute("data-undone") : "";
          clearLater(region);
          if (response.ok && done) done();
        })
        .catch(function () { button.disabled = false; });
    });
  }

  window.wikinotify = window.wikinotify || {};
  window.wikinotify.offerUndo = offer;
})();
