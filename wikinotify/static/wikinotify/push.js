// The preferences page's "Browser notifications": subscribe this browser to push (asking
// the notification permission, then PushManager.subscribe with the wiki's VAPID key) and
// store the subscription; unsubscribe it; remove any browser's subscription. Push itself
// needs JavaScript (a browser subscribes only through PushManager), so the buttons are
// hidden until this script shows them: without JavaScript the section lists the browsers
// and offers nothing that would not work. Removal works in a browser without push too.
(function () {
  "use strict";
  var section = document.getElementById("wn-push");
  if (!section || !window.fetch) return;
  var status = section.querySelector(".wn-push-status");
  var subscribeButton = section.querySelector(".wn-push-subscribe");
  var unsubscribeButton = section.querySelector(".wn-push-unsubscribe");
  var token = section.getAttribute("data-csrf");
  var headers = { "Content-Type": "application/json", "Accept": "application/json" };
  if (token) headers["X-CSRFToken"] = token;

  function say(text) { status.textContent = text; }

  section.querySelectorAll(".wn-push-remove").forEach(function (button) {
    button.hidden = false;
    button.addEventListener("click", function (event) {
      event.preventDefault();
      api("DELETE", button.getAttribute("data-delete")).then(function () {
        window.location.reload();
      }).catch(function (error) { say(error.message); });
    });
  });

  var supported = "serviceWorker" in navigator && "PushManager" in window &&
    "Notification" in window && window.isSecureContext;
  if (!supported) {
    say(section.getAttribute("data-unsupported"));
    return;
  }

  function keyBytes(base64url) {
    var padded = base64url.replace(/-/g, "+").replace(/_/g, "/");
    padded += "====".slice(0, (4 - padded.length % 4) % 4);
    var raw = atob(padded);
    var bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return bytes;
  }

  function api(method, url, body) {
    return fetch(url, {
      method: method, credentials: "same-origin", headers: headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    }).then(function (response) {
      if (!response.ok && response.status !== 404) {
        return response.json().then(function (answer) {
          throw new Error((answer.error && answer.error.message) || String(response.status));
        }, function () { throw new Error(String(response.status)); });
      }
      return response.status === 204 || response.status === 404 ? null : response.json();
    });
  }

  var registration = navigator.serviceWorker.register(section.getAttribute("data-worker"));

  function current() {
    return registration.then(function (reg) { return reg.pushManager.getSubscription(); });
  }

  function show(subscribed) {
    subscribeButton.hidden = subscribed;
    unsubscribeButton.hidden = !subscribed;
  }

  current().then(function (existing) { show(Boolean(existing)); }, function () { show(false); });

  subscribeButton.addEventListener("click", function () {
    say("");
    Notification.requestPermission().then(function (permission) {
      if (permission !== "granted") throw new Error(section.getAttribute("data-denied"));
      return Promise.all([registration, api("GET", section.getAttribute("data-key"))]);
    }).then(function (both) {
      return both[0].pushManager.subscribe({
        userVisibleOnly: true, applicationServerKey: keyBytes(both[1].publicKey),
      });
    }).then(function (subscription) {
      return api("POST", section.getAttribute("data-api"), subscription.toJSON());
    }).then(function () {
      window.location.reload();  // the grid gains its push column
    }).catch(function (error) { say(error.message); });
  });

  unsubscribeButton.addEventListener("click", function () {
    say("");
    current().then(function (subscription) {
      if (!subscription) return null;
      // This browser's row is the one whose endpointHash is its push URL's SHA-256.
      var url = new TextEncoder().encode(subscription.endpoint);
      return crypto.subtle.digest("SHA-256", url).then(function (digest) {
        var hex = Array.prototype.map.call(new Uint8Array(digest), function (b) {
          return ("0" + b.toString(16)).slice(-2);
        }).join("");
        var row = section.querySelector('[data-hash="' + hex + '"]');
        return subscription.unsubscribe().then(function () {
          return row ? api("DELETE", row.getAttribute("data-delete")) : null;
        });
      });
    }).then(function () { window.location.reload(); })
      .catch(function (error) { say(error.message); });
  });
})();
