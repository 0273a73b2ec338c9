"""A local stand-in for the model: a Chat Completions server that answers by the
conversation it is sent, so the example runs without a provider. It counts the requests
for each turn of each conversation (``asked``)."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {"id": "chatcmpl-local", "object": "chat.completion", "created": 0,
            "model": "gpt-4o-mini", "choices": [{"index": 0, "message": message,
                                                 "finish_reason": finish}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}}


def _call(turn: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return _completion({"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{turn}", "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)}}]}, "tool_calls")


def _say(text: str) -> dict[str, Any]:
    return _completion({"role": "assistant", "content": text}, "stop")


def answer(messages: list[dict[str, Any]]) -> tuple[str, int, dict[str, Any]]:
    """The conversation's question, its turn and the reply."""
    question = next(str(m["content"]) for m in messages if m["role"] == "user")
    results = [str(m["content"]) for m in messages if m["role"] == "tool"]
    turn = len(results)
    found = re.search(r"\d{4}", question)
    order = found.group(0) if found else "0000"
    if turn == 0:
        return question, turn, _call(turn, "look_up_order", {"order_id": order})
    facts = json.loads(results[0])
    if "refund" not in question.lower():
        return question, turn, _say(f"Order {order} is {facts['status']}.")
    if turn == 1:
        return question, turn, _call(turn, "issue_refund",
                                     {"order_id": order, "amount": facts["amount"]})
    return question, turn, _say(f"Order {order}: {results[1]}")


class ModelServer:
    """Serves on 127.0.0.1 at a free port, in a thread."""

    def __init__(self) -> None:
        self.asked: Counter[tuple[str, int]] = Counter()
        lock, asked = threading.Lock(), self.asked

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out as separate writes: without this, Nagle's algorithm
            # and the client's delayed ACK hold each reply back for tens of milliseconds.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                question, turn, reply = answer(body["messages"])
                with lock:
                    asked[(question, turn)] += 1
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL an OpenAI client is given."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
