"""A local HTTP server that speaks a provider's wire format from a script.

Each POST is recorded (path, headers, JSON body) and answered with the next scripted reply:
a status, a JSON body and headers, or a stream of Server-Sent Events (chunked, as the
providers send them). A streamed reply may hold after some events until the test lets it
go on, so a test can act while a model is mid-answer. The adapters under test talk to it
through the real provider SDKs, so what is checked is what would go over the network.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from fakes.served import Served


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a JSON ``body``, or ``events`` sent as Server-Sent Events.
    With ``hold``, the stream waits for it after ``hold_after`` events; with ``cut_after``,
    the connection is dropped after that many events, mid-answer."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    events: tuple[str, ...] | None = None
    hold: threading.Event | None = None
    hold_after: int = 0
    cut_after: int | None = None


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> Any:
        return json.loads(self.raw)


class FakeProvider(Served):
    """Serves ``replies`` in order on 127.0.0.1 at a free port; records every request.

    ``answer``, when given, answers each request from its JSON body instead: a server whose
    reply depends on the conversation, not on how many requests came before (a client
    killed mid-request asks again and gets the same answer).
    """

    def __init__(self, *replies: Reply, answer: Callable[[Any], Reply] | None = None) -> None:
        self.replies = list(replies)
        self.answer = answer
        self.received: list[Received] = []
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                with provider._lock:
                    provider.received.append(Received(
                        self.path, {k.lower(): v for k, v in self.headers.items()}, raw
                    ))
                    reply = (
                        provider.answer(json.loads(raw)) if provider.answer is not None
                        else provider.replies.pop(0) if provider.replies
                        else Reply(599, {"error": {"message": "script exhausted"}})
                    )
                if reply.events is not None:
                    self._stream(reply)
                    return
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                assert reply.events is not None
                try:
                    for i, event in enumerate(reply.events):
                        if reply.hold is not None and i == reply.hold_after:
                            reply.hold.wait(120)
                        if i == reply.cut_after:
                            self.close_connection = True
                            return
                        data = event.encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass  # the client went away mid-stream (a killed worker)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        super().__init__(Handler)


# -- OpenAI Chat Completions wire format --------------------------------------------------

def openai_completion(
    *,
    content: str | None = None,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    finish_reason: str = "stop",
    model: str = "gpt-4o-mini-2024-07-18",
    prompt_tokens: int = 12,
    completion_tokens: int = 5,
    cached_tokens: int = 0,
) -> Reply:
    """A 200 chat completion; ``tool_calls`` are (id, name, arguments text)."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in tool_calls
        ]
    return Reply(200, {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{
            "index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None,
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    })


def openai_stream(
    *pieces: str,
    tool_calls: Sequence[tuple[str, str, Sequence[str]]] = (),
    model: str = "gpt-4o-mini-2024-07-18",
    prompt_tokens: int = 12,
    completion_tokens: int = 5,
    hold: threading.Event | None = None,
    hold_after: int = 0,
) -> Reply:
    """A streamed chat completion: ``pieces`` of text, then ``tool_calls`` as (id, name,
    argument fragments), then the usage chunk (``stream_options.include_usage``)."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return "data: " + json.dumps({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": model, "choices": [{"index": 0, "delta": delta,
                                         "finish_reason": finish, "logprobs": None}],
        }) + "\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in pieces]
    for i, (call_id, name, fragments) in enumerate(tool_calls):
        events.append(chunk({"tool_calls": [{"index": i, "id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": i, "function": {"arguments": f}}]})
                   for f in fragments]
    events.append(chunk({}, "tool_calls" if tool_calls else "stop"))
    events.append("data: " + json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000,
        "model": model, "choices": [],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }) + "\n\n")
    events.append("data: [DONE]\n\n")
    return Reply(200, None, events=tuple(events), hold=hold, hold_after=hold_after)


def openai_error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    """An error reply as OpenAI sends it."""
    return Reply(status, {"error": {
        "message": message, "type": "invalid_request_error", "param": None, "code": None,
    }}, headers or {})


# -- Anthropic Messages wire format -------------------------------------------------------

def anthropic_message(
    *content: dict[str, Any],
    stop_reason: str = "end_turn",
    model: str = "claude-sonnet-4-20250514",
    input_tokens: int = 20,
    output_tokens: int = 7,
    cache_read_input_tokens: int = 0,
) -> Reply:
    """A 200 Messages API reply with these content blocks."""
    return Reply(200, {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cache_read_input_tokens,
        },
    })


def anthropic_stream(
    *pieces: str,
    tool_calls: Sequence[tuple[str, str, Sequence[str]]] = (),
    stop_reason: str = "end_turn",
    model: str = "claude-sonnet-4-20250514",
    input_tokens: int = 20,
    output_tokens: int = 7,
    hold: threading.Event | None = None,
    hold_after: int = 0,
) -> Reply:
    """A streamed Messages API reply: a text block of ``pieces``, then a ``tool_use``
    block per tool call as (id, name, fragments of the input's JSON)."""
    def event(kind: str, **data: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    events = [event("message_start", message={
        "id": "msg_01", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}})]
    block = 0
    if pieces:
        events.append(event("content_block_start", index=0,
                            content_block={"type": "text", "text": ""}))
        events += [event("content_block_delta", index=0,
                         delta={"type": "text_delta", "text": p}) for p in pieces]
        events.append(event("content_block_stop", index=0))
        block = 1
    for call_id, name, fragments in tool_calls:
        events.append(event("content_block_start", index=block, content_block={
            "type": "tool_use", "id": call_id, "name": name, "input": {}}))
        events += [event("content_block_delta", index=block,
                         delta={"type": "input_json_delta", "partial_json": f})
                   for f in fragments]
        events.append(event("content_block_stop", index=block))
        block += 1
    events.append(event("message_delta", delta={"stop_reason": stop_reason,
                                                "stop_sequence": None},
                        usage={"output_tokens": output_tokens}))
    events.append(event("message_stop"))
    return Reply(200, None, events=tuple(events), hold=hold, hold_after=hold_after)


def anthropic_error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> Reply:
    """An error reply as Anthropic sends it."""
    return Reply(status, {"type": "error", "error": {"type": kind, "message": message}},
                 headers or {})


def closed_port_url() -> str:
    """A URL on which nothing listens: every connection is refused."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# -- OpenAI Responses wire format ---------------------------------------------------------

def openai_response(
    *output: dict[str, Any],
    model: str = "gpt-4o-mini-2024-07-18",
    input_tokens: int = 15,
    output_tokens: int = 6,
) -> Reply:
    """A 200 ``POST /responses`` reply with these output items (see :func:`response_text`
    and :func:`response_call`)."""
    return Reply(200, {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": model,
        "status": "completed",
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    })


def response_text(text: str) -> dict[str, Any]:
    """A Responses API output message holding ``text``."""
    return {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def response_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A Responses API function call."""
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}
