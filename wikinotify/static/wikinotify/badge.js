// The header badge and its bell menu.
//
// The number is the summary's `unseen` (entries new since the menu or the inbox was last
// opened), also shown as a "(3) " prefix of the page title. It stays current from the
// Server-Sent Events stream (GET /stream: a summary on connect and on every change); the
// browser reconnects by itself when the stream ends (it has a maximum age). While the
// stream is up the summary is polled only every 5 minutes as a safety net; without it
// (no EventSource; a stream ended by the account's newer one, in another tab, past the
// streams it may hold; a refused stream: 503 when the server holds all it may or has no
// Redis) every 60 s, only while the tab is visible, asking for a stream again every 5
// minutes.
// Each summary is passed on as a "wikinotify:summary" event (the inbox page listens).
// A single-page host's route change (history.pushState/replaceState, which this script
// wraps to fire "wikinotify:route", and popstate) refreshes the summary too, at most once
// every 15 s (docs/journey.md#the-live-badge).
//
// Without JavaScript the bell is a link to the inbox; with it, it opens a menu of the
// latest 10 entries (unread first), which Escape closes, giving focus back to the bell.
(function () {
  "use strict";
  var badge = document.querySelector(".wn-badge");
  if (!badge || !window.fetch) return;
  var count = badge.querySelector(".wn-badge-count");
  var menu = document.getElementById("wn-menu");
  var list = menu.querySelector(".wn-menu-list");
  var SAFETY_NET = 300000, POLL = 60000, STREAM_AGAIN = 300000, MENU_SIZE = 10;
  var live = false, timer = null, ROUTE_REFRESH = 15000, lastRefresh = -Infinity;
  var baseTitle = document.title.replace(/^\(\d+\+?\) /, "");

  function url(name) { return badge.getAttribute("data-" + name + "-url"); }

  function write(method, target, body) {
    var headers = { "Accept": "application/json" };
    var csrf = badge.getAttribute("data-csrf");
    if (csrf) headers["X-CSRFToken"] = csrf;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    return fetch(target, { method: method, credentials: "same-origin", headers: headers,
                           body: body === undefined ? undefined : JSON.stringify(body) });
  }

  function show(summary) {
    count.textContent = summary.unseenLabel;
    count.hidden = !summary.unseen;
    badge.parentNode.hidden = !summary.enabled;
    badge.setAttribute("aria-label", summary.unseen
      ? badge.getAttribute("data-label-some").replace("{count}", summary.unseenLabel)
      : badge.getAttribute("data-label-none"));
    document.title = (summary.unseen ? "(" + summary.unseenLabel + ") " : "") + baseTitle;
    document.dispatchEvent(new CustomEvent("wikinotify:summary", { detail: summary }));
  }

  // -- keeping the number current ----------------------------------------------------

  function refresh() {
    lastRefresh = Date.now();
    fetch(url("summary"), { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (summary) { if (summary) show(summary); })
      .catch(function () { /* offline: keep what is shown */ });
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(function () {
      if (document.visibilityState === "visible") refresh();
      schedule();
    }, live ? SAFETY_NET : POLL);
  }

  function connect() {
    if (!window.EventSource) return false;
    var stream = new EventSource(url("stream"));
    stream.addEventListener("summary", function (event) { show(JSON.parse(event.data)); });
    stream.onopen = function () { live = true; schedule(); };
    // A newer stream of the account (another tab) took this one's place: poll rather
    // than reconnect, which would end another of the account's streams in turn.
    stream.addEventListener("end", function () {
      stream.close();
      live = false;
      schedule();
      refresh();
      setTimeout(connect, STREAM_AGAIN);
    });
    stream.onerror = function () {
      // CONNECTING: the browser retries by itself (after the server's `retry:`); CLOSED:
      // the server refused (503), so this page polls until a stream is given again.
      if (live) { live = false; schedule(); }
      if (stream.readyState === EventSource.CLOSED) {
        refresh();
        setTimeout(connect, STREAM_AGAIN);
      }
    };
    return true;
  }

  if (!connect()) refresh();
  schedule();
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible" && !live) refresh();
  });

  function routeChanged() {
    if (Date.now() - lastRefresh >= ROUTE_REFRESH) refresh();
  }
  ["pushState", "replaceState"].forEach(function (name) {
    var original = history[name];
    history[name] = function () {
      var result = original.apply(this, arguments);
      window.dispatchEvent(new Event("wikinotify:route"));
      return result;
    };
  });
  window.addEventListener("wikinotify:route", routeChanged);
  window.addEventListener("popstate", routeChanged);

  // -- the bell menu -------------------------------------------------------------------

  function entry(item) {
    var li = document.createElement("li");
    li.className = "wn-menu-entry" + (item.readAt ? "" : " wn-unread");
    if (!item.readAt) {
      var unread = document.createElement("span");
      unread.className = "wn-sr";
      unread.textContent = list.getAttribute("data-unread") + " ";
      li.appendChild(unread);
    }
    var face = actorFace(item.actor);
    if (face) li.appendChild(face);
    // An entry about no page (a wiki's own category, such as a failed sync) has no link.
    var text = document.createElement(item.url ? "a" : "span");
    text.className = "wn-text";
    text.textContent = item.text;
    if (item.url) text.href = item.url;
    li.appendChild(text);
    // The excerpt, where the inbox shows it (the API sends it only then).
    if (item.excerpt) {
      var excerpt = document.createElement("q");
      excerpt.className = "wn-excerpt";
      excerpt.textContent = item.excerpt;
      li.appendChild(excerpt);
    }
    // When, as the server says it to this reader (her zone and language); the exact time
    // on hover and focus.
    if (item.when) {
      var when = document.createElement("time");
      when.className = "wn-time";
      when.dateTime = item.updatedAt;
      when.title = item.when.exact;
      when.tabIndex = 0;
      when.textContent = item.when.text;
      li.appendChild(document.createTextNode(" "));
      li.appendChild(when);
    }
    if (item.available && item.page) li.appendChild(muteButton("page", item.page.id, ""));
    if (item.actor && item.actor.name) {
      li.appendChild(muteButton("user", item.actor.id, item.actor.name));
    }
    return li;
  }

  // Who acted: the wiki's picture of them (an http(s) URL, checked by the server), else
  // their initials in a circle. Decoration: the entry's sentence names them beside it.
  function actorFace(actor) {
    if (!actor || !(actor.avatarUrl || actor.initials)) return null;
    var face;
    if (actor.avatarUrl && /^https?:\/\//i.test(actor.avatarUrl)) {
      face = document.createElement("img");
      face.src = actor.avatarUrl;
      face.alt = "";
      face.width = face.height = 24;
    } else if (actor.initials) {
      face = document.createElement("span");
      face.textContent = actor.initials;
      face.setAttribute("aria-hidden", "true");
    } else {
      return null;
    }
    face.className = "wn-face";
    return face;
  }

  // "Mute this page" / "Mute <person>": PUT /api/mutes, then the button says so (and
  // keeps the focus).
  function muteButton(kind, id, name) {
    var button = document.createElement("button");
    var label = function (key) { return list.getAttribute("data-" + key).replace("{name}", name); };
    button.type = "button";
    button.className = "wn-mute";
    button.textContent = label(kind === "page" ? "mute-page" : "mute-person");
    button.addEventListener("click", function () {
      if (button.getAttribute("aria-disabled") === "true") return;
      write("PUT", url("mutes"), { kind: kind, id: id }).then(function (response) {
        if (!response.ok) return;
        button.textContent = label(kind === "page" ? "page-muted" : "person-muted");
        button.setAttribute("aria-disabled", "true");
      }).catch(function () { /* offline: the button stays as it was */ });
    });
    return button;
  }

  function fill(items) {
    // Unread first, each part newest first (the API's order), then the first ten.
    var sorted = items.filter(function (i) { return !i.readAt; })
      .concat(items.filter(function (i) { return i.readAt; })).slice(0, MENU_SIZE);
    list.textContent = "";
    if (!sorted.length) {
      var empty = document.createElement("li");
      empty.className = "wn-empty";
      empty.textContent = list.getAttribute("data-empty");
      list.appendChild(empty);
    }
    sorted.forEach(function (item) { list.appendChild(entry(item)); });
  }

  var filled = false;

  function load() {
    return fetch(url("list"), { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (response) { return response.ok ? response.json() : { items: [] }; })
      .then(function (page) { fill(page.items); filled = true; });
  }

  // Open from the click on; shown once it has entries to show (see open()).
  function isOpen() { return badge.getAttribute("aria-expanded") === "true"; }

  // The first time it opens, the menu is shown with its entries, or after SHOW_EMPTY_MS
  // without them: shown empty, the entries arriving would push "Mark all as read" and
  // "See all" down under a pointer already on its way to them. Later opens show the
  // last entries at once while they are read again.
  var SHOW_EMPTY_MS = 1000;

  // On a phone the menu is fixed across the screen (wikinotify.css), just under the bell.
  function place() {
    menu.style.setProperty("--wn-menu-top", Math.round(badge.getBoundingClientRect().bottom + 4) + "px");
  }

  function open() {
    place();
    badge.setAttribute("aria-expanded", "true");
    var show = function () { if (isOpen()) menu.hidden = false; };
    var late = null;
    if (filled) show(); else late = setTimeout(show, SHOW_EMPTY_MS);
    load().catch(function () { /* offline: the entries shown last, or none */ }).then(function () {
      clearTimeout(late);
      show();
      var first = menu.querySelector("a, button");
      if (first && isOpen()) first.focus();
    });
    // The CSRF header where the page gives a token; otherwise a JSON body, which no
    // other origin can send without a preflight.
    write("PUT", url("seen"), badge.getAttribute("data-csrf") ? undefined : {}).then(function (response) { if (!live && response.ok) refresh(); });
  }

  function close(returnFocus) {
    if (!isOpen()) return;
    menu.hidden = true;
    badge.setAttribute("aria-expanded", "false");
    if (returnFocus) badge.focus();
  }

  badge.setAttribute("role", "button");
  badge.setAttribute("aria-haspopup", "dialog");
  badge.setAttribute("aria-expanded", "false");
  badge.setAttribute("aria-controls", menu.id);
  badge.addEventListener("click", function (event) {
    event.preventDefault();
    if (isOpen()) close(true); else open();
  });
  badge.addEventListener("keydown", function (event) {
    if (event.key === " ") { event.preventDefault(); badge.click(); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && isOpen()) { event.preventDefault(); close(true); }
  });
  window.addEventListener("resize", function () { if (isOpen()) place(); });
  document.addEventListener("click", function (event) {
    if (isOpen() && !badge.parentNode.contains(event.target)) close(false);
  });
  var toast = menu.querySelector(".wn-toast");
  menu.querySelector(".wn-menu-read-all").addEventListener("click", function () {
    write("PUT", url("read-all"), {})
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        load();
        if (body && window.wikinotify && window.wikinotify.offerUndo) {
          window.wikinotify.offerUndo(toast, url("undo"), toast.getAttribute("data-marked"),
                                      body.undoToken, badge.getAttribute("data-csrf"), load);
        }
      });
  });
})();
