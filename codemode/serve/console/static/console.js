// The console's only script: it keeps the live parts of a page fresh while runs wait for approval.
// Each element with data-live is fetched again every data-interval ms and replaced only when its
// HTML changed, so an Approve button is not swapped under the pointer when nothing happened.
// Countdowns are computed here, from each request's absolute expiry, for the same reason.
(function () {
  "use strict";

  function status(text, failed) {
    var el = document.getElementById("live-status");
    if (el) {
      el.textContent = text;
      el.className = failed ? "error" : "muted";
    }
  }

  function tick() {
    var now = Date.now() / 1000;
    document.querySelectorAll("[data-expires]").forEach(function (el) {
      var left = Math.round(parseFloat(el.getAttribute("data-expires")) - now);
      el.textContent = left > 0 ? "expires in " + left + " s" : "expired";
    });
  }

  function follow(el) {
    var url = el.getAttribute("data-live");
    var every = parseInt(el.getAttribute("data-interval") || "1500", 10);
    var last = null;
    function refresh() {
      fetch(url, { credentials: "same-origin", cache: "no-store", redirect: "manual" })
        .then(function (response) {
          if (!response.ok) {
            throw new Error("HTTP " + (response.status || "redirect"));
          }
          return response.text();
        })
        .then(function (html) {
          if (html !== last) {
            last = html;
            el.innerHTML = html;
            tick();
          }
          status("live · " + new Date().toLocaleTimeString(), false);
        })
        .catch(function (error) {
          status("not updating (" + error.message + "): reload the page, or log in again", true);
        })
        .finally(function () {
          window.setTimeout(refresh, every);
        });
    }
    window.setTimeout(refresh, every);
  }

  document.addEventListener("DOMContentLoaded", function () {
    tick();
    window.setInterval(tick, 1000);
    document.querySelectorAll("[data-live]").forEach(follow);
  });
})();
