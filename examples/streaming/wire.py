"""A local model server that speaks OpenAI's Chat Completions wire format and streams.

It answers every ``POST /v1/chat/completions`` with the same short story, a word per
Server-Sent Event, ``pace`` seconds apart, then the usage. The demo needs no provider
and no key. With ``hold_after``, the first answer stops after that many words until
:meth:`WireServer.release` is called: the demo kills its worker while the model is
mid-answer, then lets the server go on.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STORY = ("The lighthouse keeper wrote one line in the log every night: the lamp was lit, "
         "the sea was calm, the ships went by. On the night of the storm she wrote two.")
WORDS = re.findall(r"\S+\s*", STORY)


class WireServer:
    """The server, on 127.0.0.1 at a free port, in a thread of its own.

    Args:
        pace: Seconds between two words.
        hold_after: Hold the first answer after this many words (None: never).
    """

    def __init__(self, *, pace: float = 0.05, hold_after: int | None = None) -> None:
        self.pace = pace
        self.hold_after = hold_after
        self.requests = 0
        self._lock = threading.Lock()
        self._released = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                with server._lock:
                    server.requests += 1
                    first = server.requests == 1
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    for i, data in enumerate(server.chunks(str(body.get("model", "story")))):
                        if first and server.hold_after is not None \
                                and i == server.hold_after + 1:
                            server._released.wait(300)
                        if 0 < i <= len(WORDS):
                            time.sleep(server.pace)
                        raw = f"data: {data}\n\n".encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    return  # the worker died mid-answer

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """The URL an OpenAI client is given (``.../v1``)."""
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def chunks(self, model: str) -> list[str]:
        """The answer's chunks: the opening one (index 0), a word each, the end, usage."""
        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            return json.dumps({"id": "story-1", "object": "chat.completion.chunk",
                               "created": 0, "model": model,
                               "choices": [{"index": 0, "delta": delta,
                                            "finish_reason": finish}]})

        out = [chunk({"role": "assistant", "content": ""})]
        out += [chunk({"content": w}) for w in WORDS]
        out.append(chunk({}, "stop"))
        out.append(json.dumps({"id": "story-1", "object": "chat.completion.chunk",
                               "created": 0, "model": model, "choices": [],
                               "usage": {"prompt_tokens": 12, "completion_tokens": len(WORDS),
                                         "total_tokens": 12 + len(WORDS)}}))
        out.append("[DONE]")
        return out

    def release(self) -> None:
        """Let a held answer go on."""
        self._released.set()

    def __enter__(self) -> WireServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._http.shutdown()
        self._http.server_close()
