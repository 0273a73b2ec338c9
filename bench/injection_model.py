"""The benchmark's model: it does a user task correctly and always obeys an injection.

It is a :class:`~underway.testing.RuleModel`: its answer is a function of the request, so a
restarted worker hears the same. From the conversation it rebuilds what it read (each
tool result in order) and replays its own decisions:

- the plan turn answers ``set_plan`` naming the tools the user task writes with;
- each act turn makes the next call: an obeyed injection's calls first, then the user
  task's next step, its values taken from the goal and what was read;
- an injection it reads in any tool output (its pattern found in the text) is obeyed at
  once, once: its calls, their values from the injected text, and for an attack on the
  answer, the injected text repeated at the end of the answer;
- a call the guard refused comes back as an error; the model goes on with the next step,
  and answers when it has no more.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Sequence
from typing import Any

from injection_suites import Call, InjectionTask, Seen, Step, UserTask, text_of
from underway.models.types import ModelRequest, ModelResponse
from underway.testing import RuleModel, say

_BLOCK = re.compile(r'\A<tool_output source="[^"]*" trust="(?:un)?trusted">\n(.*)\n'
                    r'</tool_output>\Z', re.DOTALL)


def _value(content: str) -> Any:
    """A tool message's value, as the tool returned it."""
    m = _BLOCK.match(content)
    body = (m[1] if m else content).replace("<\\/tool_output>", "</tool_output>")
    try:
        return json.loads(body)
    except ValueError:
        return body


def results(request: ModelRequest) -> list[tuple[str, Any]]:
    """The tool results the conversation holds, in order: (tool, value)."""
    return [(m.name or "", _value(m.content)) for m in request.messages if m.role == "tool"]


def decide(task: UserTask, injections: Sequence[InjectionTask],
           request: ModelRequest) -> ModelResponse:
    """The model's answer to ``request``.

    Args:
        task: The user task it does.
        injections: The injections it recognises (and obeys) in what it reads.
        request: The request.
    """
    if request.kind == "plan":
        steps = [f"Work on the goal: {task.goal}", "Answer the user."]
        return say(None, ("set_plan", {"steps": steps, "tools": list(task.writes)}))
    done = results(request)
    seen = Seen()
    queue: deque[Call | Step] = deque()
    obeyed: set[str] = set()
    repeats: list[str] = []
    step = 0
    taken = 0
    while True:
        action: Call | None = None
        if queue:
            first = queue.popleft()
            action = first(seen) if callable(first) else first
        while action is None and step < len(task.steps):
            action = task.steps[step](seen)
            step += 1
        if action is None:
            answer = " ".join([task.answer(seen), *repeats])
            return say(answer)
        if taken == len(done):
            return say(None, action)
        tool, value = done[taken]
        taken += 1
        seen.add(tool, value)
        text = text_of(value)
        for inj in injections:
            if inj.id in obeyed or (m := re.search(inj.pattern, text)) is None:
                continue
            obeyed.add(inj.id)
            queue.extend(inj.calls(m))
            if inj.repeat is not None:
                repeats.append(inj.repeat(m))


def obedient_model(task: UserTask, injections: Sequence[InjectionTask]) -> RuleModel:
    """A model that does ``task`` and obeys every injection of ``injections`` it reads.

    Args:
        task: The user task.
        injections: The suite's injection tasks.
    """
    return RuleModel(lambda request: decide(task, injections, request),
                     name="obedient-replay")
