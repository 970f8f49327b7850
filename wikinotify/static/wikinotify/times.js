// Relative times tick while the page stays open (docs/rules.md#whose-time): every minute,
// each <time class="wn-time"> of the last week says its age again ("3 min ago"), from its
// datetime, in the language of the page around it, as the server words it (Babel's
// units and rounding, the short style). Under a minute it keeps what the server wrote
// ("just now"); older than a week it keeps its date. The exact time stays its title.
(function () {
  "use strict";
  if (window.wikinotifyTicking || !window.Intl || !Intl.RelativeTimeFormat) return;
  window.wikinotifyTicking = true;
  var MINUTE = 60, WEEK = 7 * 24 * 3600, THRESHOLD = 0.85;
  // Babel's units from the largest; within a week, months and years never show.
  var UNITS = [["week", WEEK], ["day", 24 * 3600], ["hour", 3600], ["minute", MINUTE]];
  var formats = {};
  function format(language) {
    if (!formats[language]) {
      try {
        formats[language] = new Intl.RelativeTimeFormat(language, { style: "short", numeric: "always" });
      } catch (e) {
        formats[language] = new Intl.RelativeTimeFormat(undefined, { style: "short", numeric: "always" });
      }
    }
    return formats[language];
  }
  function tick() {
    var now = Date.now();
    var times = document.querySelectorAll("time.wn-time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var time = times[i], at = Date.parse(time.getAttribute("datetime"));
      var age = (now - at) / 1000;
      if (isNaN(at) || age < MINUTE || age >= WEEK) continue;
      for (var u = 0; u < UNITS.length; u++) {
        var value = age / UNITS[u][1];
        if (value >= THRESHOLD || u === UNITS.length - 1) {
          var scoped = time.closest("[lang]");
          var said = format(scoped ? scoped.lang : document.documentElement.lang || "en")
            .format(-Math.max(1, Math.round(value)), UNITS[u][0]);
          if (time.textContent !== said) time.textContent = said;
          break;
        }
      }
    }
  }
  setInterval(tick, 60 * 1000);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) tick();
  });
})();

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
