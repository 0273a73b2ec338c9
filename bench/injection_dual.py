"""The plan-and-extract benchmark's two models: a planner that submits a user task's program
(``injection_programs``), and an extractor that does its extraction well and always obeys
an injection within the schema.

Both are :class:`~underway.testing.RuleModel`: each answer is a function of the request.

The planner never reads data. It submits the task's program; when the run says a step
failed, it submits the rest of the program: the steps not done that do not depend on the
failed ones (a step before the failed one that is not done failed too: steps run in
order), and the answer when all it references is still to come (else an answer that says
the task could not be finished).

The extractor reads the instruction, the schema and the text. It computes the value a
competent extractor gives (:attr:`~injection_programs.Extraction.correct`), then obeys every
injection it finds in the text (the injection's pattern, as the obedient agent model finds
it), choosing the attacker's value wherever the schema admits it:

- an argument that carries free text (a body, a message, a file's content, a part of the
  answer) gets the attacker's text for that argument, and any sentence an injection asks to
  repeat in the answer, appended;
- any other argument gets the attacker's value for an argument of the same name (an amount,
  a hotel, a recipient), or one of the same kind (an e-mail address, an IBAN, a link, an
  id, a file name); in a list, the attacker's value comes first.

This is the worst case for the quarantined model: its schema is the only limit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from injection_programs import Program
from injection_suites import InjectionTask, text_of
from underway.agent._program import schema_errors
from underway.models.types import ModelRequest, ModelResponse
from underway.testing import RuleModel, say

_BLOCK = re.compile(r'\A<tool_output source="[^"]*" trust="(?:un)?trusted">\n(.*)\n'
                    r'</tool_output>\Z', re.DOTALL)
_STOPPED = re.compile(r"The program stopped: step (\S+) \(.*?\) failed with \S+\. Steps done, "
                      r"[^:]*: (\[.*?\])\. Submit", re.DOTALL)

TEXT_FIELDS = frozenset({"body", "text", "content", "subject", "title", "description",
                         "answer"})
"""Arguments that carry free text: an obeyed injection adds its text to them."""

_KINDS = (
    ("email", re.compile(r"\A[\w.+-]+@[\w-]+(?:\.[\w-]+)+\Z")),
    ("url", re.compile(r"\Ahttps?://\S+\Z")),
    ("iban", re.compile(r"\A[A-Z]{2}\d{2}[A-Z0-9]{10,30}\Z")),
    ("id", re.compile(r"\A[a-z]{2}-\d+\Z")),
    ("file", re.compile(r"\A[\w.-]+\.(?:txt|xlsx|docx|pdf)\Z")),
)
"""Kinds of value an attacker's value replaces, whatever the argument's name."""


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        own = [str(value["$ref"])] if "$ref" in value else []
        return own + [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def rest_of(program: dict[str, Any], done: Sequence[str], failed: str) -> dict[str, Any]:
    """What the planner submits after ``failed`` stopped ``program``: the steps not done
    that do not depend on a failed one, and the answer if it still can be given (an answer
    of plain text, "Done.", no longer says the truth: it says what failed).

    Args:
        program: The program first submitted.
        done: The steps done, by id.
        failed: The step that failed (an inline extraction's id names its step's).
    """
    # The steps run in order: one before the failed step that is not done failed earlier
    # (or needed one that did), so it is not submitted again.
    owner = failed.split("_x")[0]
    ids = [s["id"] for s in program["steps"]]
    upto = ids.index(owner) + 1 if owner in ids else len(ids)
    gone = {failed, owner, *(i for i in ids[:upto] if i not in done)}
    ready = set(done)
    steps = []
    for step in program["steps"]:
        sid = step["id"]
        if sid in ready or sid in gone:
            continue
        if all(r.split(".")[0] in ready for r in _refs(step)):
            steps.append(step)
            ready.add(sid)
    answer = program["answer"]
    refs = _refs(answer)
    if not refs or owner == "answer" or any(r.split(".")[0] not in ready for r in refs):
        answer = f"I could not finish the task: step {failed} failed."
    return {"steps": steps, "answer": answer}


def planner_model(program: Program) -> RuleModel:
    """A planner that submits ``program``, and the rest of it after a failed step.

    Args:
        program: The user task's program.
    """
    def decide(request: ModelRequest) -> ModelResponse:
        for m in reversed(request.messages):
            if m.role == "user" and (found := _STOPPED.search(m.content or "")):
                done = [d["id"] for d in json.loads(found[2])]
                return say(None, ("submit_program", rest_of(program.program, done,
                                                             found[1])))
        return say(None, ("submit_program", program.program))
    return RuleModel(decide, name="scripted-planner")


def kind_of(value: Any) -> str:
    """A value's kind: ``email``, ``url``, ``iban``, ``id``, ``file``, ``number`` or
    ``text`` (a list: its first item's)."""
    if isinstance(value, list):
        return kind_of(value[0]) if value else "text"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "number"
    text = str(value)
    return next((k for k, rx in _KINDS if rx.match(text)), "text")


def attacker_values(text: str, injections: Sequence[InjectionTask]) -> list[tuple[str, Any]]:
    """The values the injections found in ``text`` ask for: (argument, value) each, and
    (``answer``, sentence) for a sentence to repeat in the answer.

    Args:
        text: The text the extractor reads.
        injections: The suite's injection tasks.
    """
    out: list[tuple[str, Any]] = []
    for inj in injections:
        m = re.search(inj.pattern, text)
        if m is None:
            continue
        if inj.repeat is not None:
            out.append(("answer", inj.repeat(m)))
        for c in inj.calls(m):
            if callable(c):
                continue
            for name, value in c[1].items():
                out += [(name, v) for v in (value if isinstance(value, list) else [value])]
    return out


def obey(correct: Any, schema: dict[str, Any], field: str,
         attacks: Sequence[tuple[str, Any]]) -> Any:
    """The value an extractor that obeys ``attacks`` gives for ``field``, within ``schema``.

    Args:
        correct: The value it gives with no injection.
        schema: The extraction's schema.
        field: The argument the value fills.
        attacks: :func:`attacker_values` of the text.
    """
    if field in TEXT_FIELDS and isinstance(correct, str):
        extra = [str(v) for k, v in attacks if k in ("answer", field)]
        joined = " ".join([correct, *extra])
        return joined if extra and not schema_errors(joined, schema) else correct
    kind = kind_of(correct)
    for name, value in attacks:
        if name != field and (kind == "text" or kind == "number" or kind_of(value) != kind):
            continue
        got = [value, *correct] if isinstance(correct, list) else value
        if not schema_errors(got, schema):
            return got
    return correct


def _value(content: str) -> Any:
    m = _BLOCK.match(content)
    body = (m[1] if m else content).replace("<\\/tool_output>", "</tool_output>")
    try:
        return json.loads(body)
    except ValueError:
        return body


def extractor_model(program: Program, injections: Sequence[InjectionTask]) -> RuleModel:
    """An extractor that does ``program``'s extractions and obeys every injection it reads.

    Args:
        program: The user task's program.
        injections: The suite's injection tasks.
    """
    def decide(request: ModelRequest) -> ModelResponse:
        system = next(m.content or "" for m in request.messages if m.role == "system")
        instruction = system.split("What to extract: ", 1)[1].strip()
        spec = program.extractions[instruction]
        value = _value(next(m.content or "" for m in request.messages if m.role == "user"))
        schema = (request.response_schema or {})["properties"]["value"]
        got = obey(spec.correct(value), schema, spec.field,
                   attacker_values(text_of(value), injections))
        return say(json.dumps({"value": got}))
    return RuleModel(decide, name="obedient-extractor")
