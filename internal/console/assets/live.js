// The console's live parts, without a framework: an element with
// data-feed takes what its feed (server-sent events, "update") sends,
// markup the server rendered and escaped as the page's; a time with
// data-age shows how long ago it was, again every 30 seconds.
(function () {
  "use strict";
  function age(ms) {
    var m = Math.floor(ms / 60000);
    if (m < 1) return "just now";
    if (m < 60) return m + " min";
    if (m < 1440) return Math.floor(m / 60) + " h " + (m % 60) + " min";
    return Math.floor(m / 1440) + " d " + Math.floor((m % 1440) / 60) + " h";
  }
  function ages() {
    var now = Date.now();
    document.querySelectorAll("time[data-age]").forEach(function (el) {
      var t = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(t)) el.textContent = age(now - t);
    });
  }
  document.querySelectorAll("[data-feed]").forEach(function (el) {
    var feed = new EventSource(el.getAttribute("data-feed"));
    feed.addEventListener("update", function (e) {
      el.innerHTML = e.data;
      el.setAttribute("data-updated", String(Date.now()));
      ages();
    });
  });
  ages();
  setInterval(ages, 30000);
})();
