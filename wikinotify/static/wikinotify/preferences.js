// Preferences without a page reload: every toggle saves the full map through the JSON
// API. Without JavaScript the same form posts and redirects back.
(function () {
  "use strict";
  var form = document.getElementById("wn-preferences-form");
  if (!form || !window.fetch) return;
  var status = form.querySelector(".wn-status");
  var save = form.querySelector(".wn-save");
  if (save) save.hidden = true;  // every change saves itself

  // Each row's boxes are named "<category>.<channel>": in-app and email, and webhook and
  // chat where the reader set one up.
  function currentMap() {
    var categories = {};
    form.querySelectorAll("tr[data-category]").forEach(function (row) {
      var key = row.getAttribute("data-category");
      var channels = {};
      row.querySelectorAll('input[type="checkbox"]').forEach(function (box) {
        channels[box.name.slice(key.length + 1)] = box.checked;
      });
      categories[key] = channels;
    });
    return { categories: categories };
  }

  function apply(body) {
    body.categories.forEach(function (c) {
      body.channels.forEach(function (channel) {
        var box = form.querySelector('input[name="' + c.key + "." + channel + '"]');
        if (box) box.checked = c[channel];
      });
    });
  }

  // The form's own CSRF token goes along as a header, as every API write expects.
  var token = form.querySelector('input[name="csrf_token"]');
  var headers = { "Content-Type": "application/json", "Accept": "application/json" };
  if (token) headers["X-CSRFToken"] = token.value;

  function put(map) {
    status.textContent = "";
    return fetch(form.getAttribute("data-api"), {
      method: "PUT",
      credentials: "same-origin",
      headers: headers,
      body: JSON.stringify(map),
    }).then(function (response) {
      if (!response.ok) throw new Error(String(response.status));
      return response.json();
    }).then(function (body) {
      apply(body);
      status.textContent = form.getAttribute("data-saved");
    }).catch(function () {
      status.textContent = form.getAttribute("data-failed");
    });
  }

  form.addEventListener("change", function (event) {
    if (event.target.matches('input[type="checkbox"]')) put(currentMap());
  });

  var stopAll = form.querySelector(".wn-stop-all");
  if (stopAll) {
    stopAll.addEventListener("click", function (event) {
      event.preventDefault();
      form.querySelectorAll('input[name$=".email"]').forEach(function (box) {
        box.checked = false;
      });
      put(currentMap());
    });
  }
})();
