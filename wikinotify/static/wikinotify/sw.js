// wikinotify's service worker (docs/channels.md#browser-push): shows a push as a
// notification, and opens its entry's link when it is clicked.
//
// Served at <prefix>/sw.js (default /_notifications/sw.js), so its scope is the prefix: it
// controls none of the wiki's pages (no fetch handler), and needs none, since a push
// reaches the registration wherever the reader is. The payload is JSON:
// {"title", "body", "url", "tag", "category"}; the tag is the entry's id, so a coalesced
// "edited 3 times" replaces "edited" on the screen instead of stacking beside it.
"use strict";

self.addEventListener("install", function () {
  self.skipWaiting();
});

self.addEventListener("activate", function (event) {
  event.waitUntil(self.clients.claim());
});

function readPayload(event) {
  if (!event.data) return {};
  try {
    return event.data.json();
  } catch (error) {
    return { body: event.data.text() };
  }
}

self.addEventListener("push", function (event) {
  var message = readPayload(event);
  var options = {
    body: message.body || "",
    tag: message.tag ? "wikinotify-" + message.tag : undefined,
    // A replaced notification (same tag) is announced again, as it says something new.
    renotify: Boolean(message.tag),
    data: { url: message.url || null },
  };
  event.waitUntil(self.registration.showNotification(message.title || "", options));
});

self.addEventListener("notificationclick", function (event) {
  event.notification.close();
  var url = event.notification.data && event.notification.data.url;
  if (!url) return;
  var target = new URL(url, self.location.origin).href;
  event.waitUntil(
    self.clients.matchAll({ type: "window", includeUncontrolled: true }).then(function (tabs) {
      // A tab already on the entry's page is brought forward rather than opened again.
      for (var i = 0; i < tabs.length; i++) {
        if (tabs[i].url === target && "focus" in tabs[i]) return tabs[i].focus();
      }
      return self.clients.openWindow ? self.clients.openWindow(target) : undefined;
    })
  );
});
