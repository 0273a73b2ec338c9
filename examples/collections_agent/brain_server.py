"""The collections brain behind the OpenAI Chat Completions wire format, on 127.0.0.1.

With it the demo's agent talks to its model the way it would talk to a real provider —
through ``underway.models.OpenAIChat``, the official ``openai`` SDK and HTTP — without a
provider or a network::

    python -m examples.collections_agent.brain_server --port 8765 &
    UNDERWAY_MODEL=openai-compatible:collections-brain@http://127.0.0.1:8765/v1 make demo

Each ``POST /v1/chat/completions`` is turned back into a
:class:`~underway.models.ModelRequest` (a request that offers only ``set_plan`` is a
planning request), answered by :class:`~examples.collections_agent.brain.CollectionsBrain`
and sent back as a chat completion with tool calls and usage (four characters a token).
``--rate-limit-every N`` answers every Nth request with ``429`` and ``retry-after: 0``,
as a busy provider would, so the adapter's retries are exercised too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.collections_agent.brain import DAY_ENV, CollectionsBrain, day_seconds

from underway.models.types import Message, ModelRequest, ModelResponse, ToolCall, ToolSpec

MODEL_ID = "collections-brain"


def request_of(body: dict[str, Any]) -> ModelRequest:
    """The :class:`ModelRequest` a chat-completions request body carries."""
    messages = []
    for m in body["messages"]:
        calls = [ToolCall.parse(c["id"], c["function"]["name"], c["function"]["arguments"])
                 for c in m.get("tool_calls") or []]
        messages.append(Message(role=m["role"], content=m.get("content") or "",
                                tool_calls=calls, tool_call_id=m.get("tool_call_id")))
    tools = [ToolSpec(name=t["function"]["name"],
                      description=t["function"].get("description", ""),
                      parameters=t["function"]["parameters"])
             for t in body.get("tools") or []]
    kind = "plan" if [t.name for t in tools] == ["set_plan"] else "act"
    return ModelRequest(messages=messages, tools=tools, kind=kind)


def completion_of(resp: ModelResponse, *, number: int, prompt_chars: int) -> dict[str, Any]:
    """``resp`` as a chat completion."""
    calls = [{"id": c.id, "type": "function",
              "function": {"name": c.name, "arguments": json.dumps(c.arguments or {})}}
             for c in resp.tool_calls]
    message: dict[str, Any] = {"role": "assistant", "content": resp.text}
    if calls:
        message["tool_calls"] = calls
    tokens_in, tokens_out = prompt_chars // 4, len(resp.model_dump_json()) // 4
    return {
        "id": f"chatcmpl-{number}", "object": "chat.completion", "created": 0,
        "model": MODEL_ID,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                  "total_tokens": tokens_in + tokens_out},
    }


class BrainServer:
    """Serves the brain on 127.0.0.1 (``port`` 0: a free one) from a background thread;
    counts the completions it answered and the rate limits it played."""

    def __init__(self, *, day: float, port: int = 0, rate_limit_every: int = 0) -> None:
        self.brain = CollectionsBrain(day)
        self.completions = 0
        self.rate_limited = 0
        self._requests = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with server._lock:
                    server._requests += 1
                    limited = rate_limit_every > 0 and server._requests % rate_limit_every == 0
                    server.rate_limited += limited
                if limited:
                    self._send(429, {"error": {"message": "rate limited, try again",
                                               "type": "rate_limit_exceeded"}},
                               {"retry-after": "0"})
                    return
                try:
                    req = request_of(json.loads(raw))
                    resp = server.brain(req)
                except Exception as exc:  # a bad request is the client's problem: say so
                    self._send(400, {"error": {"message": f"{type(exc).__name__}: {exc}"}})
                    return
                with server._lock:
                    server.completions += 1
                    number = server.completions
                self._send(200, completion_of(resp, number=number, prompt_chars=len(raw)))

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None
                      ) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> BrainServer:
        """Start serving."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m examples.collections_agent.brain_server",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--rate-limit-every", type=int, default=0, metavar="N")
    parser.add_argument("--day-seconds", type=float, default=None,
                        help=f"the length of a day (default: ${DAY_ENV}, else the demo's 1 s)")
    args = parser.parse_args(argv)
    day = args.day_seconds or (day_seconds() if os.environ.get(DAY_ENV) else 1.0)
    server = BrainServer(day=day, port=args.port,
                         rate_limit_every=args.rate_limit_every).start()
    print(f"UNDERWAY_MODEL=openai-compatible:{MODEL_ID}@{server.base_url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
