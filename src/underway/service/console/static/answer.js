// The run page's live model answer: the tokens and tool-call fragments of each streamed
// model call as they arrive (Server-Sent Events from /runs/{id}/stream; the session
// cookie goes with them). A call is one block, named by its step and position. A
// "restart" delta means the call's earlier attempt was abandoned: its block is cleared
// and starts over. "done" means the reply is journaled. Text is set with textContent.
(function () {
  "use strict";
  var card = document.getElementById("answer");
  if (!card || !window.EventSource) {
    return;
  }
  var calls = document.getElementById("answer-calls");
  var state = document.getElementById("answer-state");
  var blocks = {};

  function block(d) {
    var found = blocks[d.key];
    if (found) {
      return found;
    }
    var box = document.createElement("div");
    box.className = "answer-call";
    box.setAttribute("data-key", d.key);
    var head = document.createElement("h3");
    head.textContent = "step " + d.step + " · call " + d.index;
    var note = document.createElement("span");
    note.className = "muted answer-note";
    head.appendChild(document.createTextNode(" "));
    head.appendChild(note);
    var text = document.createElement("pre");
    text.className = "answer-text";
    var tools = document.createElement("ul");
    tools.className = "answer-tools";
    box.appendChild(head);
    box.appendChild(text);
    box.appendChild(tools);
    calls.appendChild(box);
    found = { box: box, note: note, text: text, tools: tools, calls: {} };
    blocks[d.key] = found;
    card.classList.remove("hidden");
    return found;
  }

  function toolLine(b, delta) {
    var line = b.calls[delta.index];
    if (!line) {
      line = document.createElement("li");
      line.appendChild(document.createElement("code"));
      line.appendChild(document.createTextNode(" "));
      line.appendChild(document.createElement("span"));
      b.tools.appendChild(line);
      b.calls[delta.index] = line;
    }
    if (delta.name) {
      line.firstChild.textContent = delta.name;
    }
    line.lastChild.textContent += delta.arguments || "";
  }

  var source = new EventSource(card.getAttribute("data-tokens"));
  source.addEventListener("delta", function (m) {
    var d = JSON.parse(m.data);
    var delta = d.delta || {};
    var b = block(d);
    if (delta.type === "text") {
      b.text.textContent += delta.text;
    } else if (delta.type === "tool_call") {
      toolLine(b, delta);
    } else if (delta.type === "restart") {
      b.text.textContent = "";
      b.tools.textContent = "";
      b.calls = {};
      b.note.textContent = "started over (attempt " + delta.attempt + ")";
    } else if (delta.type === "done") {
      b.box.classList.add("done");
      b.note.textContent = "journaled";
    }
  });
  source.addEventListener("end", function () {
    source.close();
    state.textContent = "finished";
  });
  source.addEventListener("unauthorized", function (m) {
    source.close();
    state.textContent = "stopped: " + JSON.parse(m.data).detail;
  });
  source.onerror = function () {
    state.textContent = "reconnecting…";
  };
  source.onopen = function () {
    state.textContent = "streaming";
  };
})();
