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
from collections import Counter
from typing import Any

from fakes.model_provider import FakeProvider, Reply, openai_completion


def answer(body: dict[str, Any], turns: int, calls: int) -> tuple[str, int, Reply]:
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
    return run, turn, reply


class AgentWire(FakeProvider):
    """Serves the conversation on 127.0.0.1 at a free port; ``asked[(run, turn)]`` counts
    the requests for each turn."""

    def __init__(self, turns: int = 3, calls: int = 1) -> None:
        self.asked: Counter[tuple[str, int]] = Counter()

        def reply(body: Any) -> Reply:
            # Called under the server's lock: the count needs none of its own.
            run, turn, completion = answer(body, turns, calls)
            self.asked[(run, turn)] += 1
            return completion

        super().__init__(answer=reply)

    @property
    def url(self) -> str:
        """The base URL an OpenAI client is given."""
        return f"{self.origin}/v1"
