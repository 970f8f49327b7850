// The browser's time zone, for a reader who chose none (docs/rules.md#whose-time).
//
// The server draws a page in the reader's chosen zone; without one, in the zone this
// browser last said (the cookie), else the site's, and marks those times with
// data-wn-zone. This writes the browser's zone in the cookie, and when a page was drawn in
// another zone because the cookie was missing or out of date, asks for the page again,
// once: the inbox's days and times are then the reader's own.
(function () {
  "use strict";
  if (window.wikinotifyTimes || !window.Intl) return;
  window.wikinotifyTimes = true;
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  // An IANA name ("America/Los_Angeles") is safe in a cookie as it is; the server reads
  // cookies without URL-decoding them.
  if (!zone || !/^[A-Za-z0-9_+\/-]+$/.test(zone)) return;
  var NAME = "wikinotify_tz";
  function cookie() {
    var found = document.cookie.split("; ").filter(function (c) { return c.indexOf(NAME + "=") === 0; })[0];
    return found ? found.slice(NAME.length + 1) : null;
  }
  if (cookie() === zone) return;
  document.cookie = NAME + "=" + zone + "; path=/; max-age=31536000; samesite=lax";
  var drawn = document.querySelector("time[data-wn-zone]");
  // Only when the cookie took: a browser that refuses cookies would ask forever.
  if (drawn && drawn.getAttribute("data-wn-zone") !== zone && cookie() === zone) location.reload();
})();
