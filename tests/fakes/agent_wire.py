"""A local Chat Completions server that plays an agent's model by the conversation it is
sent, not by the order of requests, so a process killed and restarted mid-run gets the same
answer to the same question. It counts every request per run and turn.

The user message names the run (``run-3``). Turn ``t`` below ``turns`` asks for ``calls``
calls in one response, ``record({"run": <run>, "step": t, "part": p})`` for each part
``p``; then it answers ``done <run>``. A turn is told by the tool results in the
conversation.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fakes.model_provider import openai_completion


def answer(body: dict[str, Any], turns: int, calls: int) -> tuple[str, int, dict[str, Any]]:
    """The run, the turn and the completion a request gets."""
    messages = body["messages"]
    run = next(str(m["content"]) for m in messages if m["role"] == "user")
    turn = sum(1 for m in messages if m["role"] == "tool") // calls
    if turn < turns:
        reply = openai_completion(
            tool_calls=[(f"call_{turn}_{p}", "record",
                         json.dumps({"run": run, "step": turn, "part": p}))
                        for p in range(calls)],
            finish_reason="tool_calls")
    else:
        reply = openai_completion(content=f"done {run}")
    return run, turn, reply.body


class AgentWire:
    """Serves the conversation on 127.0.0.1 at a free port; ``asked[(run, turn)]`` counts
    the requests for each turn."""

    def __init__(self, turns: int = 3, calls: int = 1) -> None:
        self.asked: Counter[tuple[str, int]] = Counter()
        self._lock = threading.Lock()
        wire = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                run, turn, reply = answer(body, turns, calls)
                with wire._lock:
                    wire.asked[(run, turn)] += 1
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,),
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> AgentWire:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
