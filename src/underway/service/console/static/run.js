// The run page: the state after an event without leaving the page, and new events as the
// run moves (Server-Sent Events from /runs/{id}/events/stream; the session cookie goes with
// them). Everything the server sends is already escaped; values set here use textContent.
(function () {
  "use strict";
  var timeline = document.getElementById("timeline");
  if (!timeline) {
    return;
  }

  function byId(id) {
    return document.getElementById(id);
  }

  function setStatus(status) {
    ["run-status", "facts-status"].forEach(function (id) {
      var badge = byId(id);
      if (badge && status) {
        badge.textContent = status;
        badge.className = "status " + status;
      }
    });
  }

  function mark(seq) {
    var old = timeline.querySelectorAll("li.picked");
    for (var i = 0; i < old.length; i++) {
      old[i].classList.remove("picked");
    }
    var item = byId("e-" + seq);
    if (item) {
      item.classList.add("picked");
    }
  }

  function showState(seq, href) {
    var base = timeline.getAttribute("data-state");
    var url = base + (base.indexOf("?") < 0 ? "?" : "&") + "at=" + encodeURIComponent(seq);
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("state " + r.status);
        }
        return r.json();
      })
      .then(function (data) {
        byId("state-title").textContent = "State after event " + data.seq + " · " + data.type;
        byId("state-summary").textContent = data.time + " · " + data.summary;
        byId("state-patch").textContent = JSON.stringify(data.patch, null, 2);
        byId("state-json").textContent = JSON.stringify(data.state, null, 2);
        byId("state-body").classList.remove("hidden");
        mark(data.seq);
        if (window.history && window.history.replaceState) {
          window.history.replaceState(null, "", href);
        }
        byId("state").scrollIntoView({ block: "nearest" });
      })
      .catch(function () {
        window.location.href = href; // the page shows the same, rendered by the server
      });
  }

  timeline.addEventListener("click", function (ev) {
    var link = ev.target.closest ? ev.target.closest("a[data-at]") : null;
    if (!link || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) {
      return;
    }
    ev.preventDefault();
    showState(link.getAttribute("data-at"), link.href);
  });

  var picked = new URLSearchParams(window.location.search).get("at");
  if (picked) {
    mark(picked);
  }

  var stream = timeline.getAttribute("data-stream");
  if (!stream || !window.EventSource) {
    return;
  }
  var live = byId("live");
  var source = new EventSource(stream);
  source.onmessage = function (m) {
    var data = JSON.parse(m.data);
    if (byId("e-" + data.seq)) {
      return; // a reconnection may send an event again
    }
    timeline.insertAdjacentHTML("beforeend", data.html);
    ["shown-last", "shown-head"].forEach(function (id) {
      var counter = byId(id);
      if (counter) {
        counter.textContent = String(data.seq);
      }
    });
  };
  // The facts as the server renders them (what the run waits on, with its links), put in
  // place whenever the run's status or step changes; until they arrive the old ones stay.
  var factsList = byId("facts-list");
  var shown = { status: byId("run-status") ? byId("run-status").textContent : "",
                step: byId("facts-step") ? byId("facts-step").textContent : "" };
  function refreshFacts() {
    if (!factsList) {
      return;
    }
    fetch(factsList.getAttribute("data-facts"), { credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("facts " + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        factsList.innerHTML = html; // rendered and escaped by the server
      })
      .catch(function () {
        var waiting = byId("facts-waiting");
        if (waiting) {
          waiting.textContent = "changed: reload the page to see it";
        }
      });
  }
  // The overview (steps and graph) as the server draws it now: the page itself, read
  // again, its two sections put in place of the old ones (parsed, never run).
  function refreshOverview() {
    fetch(window.location.pathname + window.location.search, { credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("page " + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        ["overview", "graph"].forEach(function (id) {
          var now = fresh.getElementById(id);
          var old = byId(id);
          if (now && old) {
            old.replaceWith(document.importNode(now, true));
          }
        });
      })
      .catch(function () {
        return; // the old overview stays; a reload shows the new one
      });
  }
  source.addEventListener("status", function (m) {
    var data = JSON.parse(m.data);
    var step = data.step || "—";
    if (data.status === shown.status && step === shown.step) {
      return; // what the page already shows
    }
    shown = { status: data.status, step: step };
    setStatus(data.status);
    var heading = byId("waiting-on");
    if (heading) {
      heading.textContent = data.waiting ? "on " + data.waiting : "";
    }
    refreshFacts();
    refreshOverview();
  });
  source.addEventListener("end", function (m) {
    var data = JSON.parse(m.data);
    setStatus(data.status);
    var heading = byId("waiting-on");
    if (heading) {
      heading.textContent = "";
    }
    source.close();
    refreshFacts();
    refreshOverview();
    if (live) {
      live.textContent = "finished";
      live.classList.remove("live");
      live.classList.add("stopped");
    }
  });
  source.addEventListener("unauthorized", function (m) {
    var data = JSON.parse(m.data);
    source.close();
    if (live) {
      live.textContent = "stopped: " + data.detail + " — sign in again";
    }
  });
  source.onerror = function () {
    if (live) {
      live.textContent = "reconnecting…";
    }
  };
  source.onopen = function () {
    if (live) {
      live.textContent = "live";
    }
  };
})();
