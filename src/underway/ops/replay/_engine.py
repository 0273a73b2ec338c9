"""The replay's executor: the real engine — guard, policy, approvals, budgets, the effect
ledger — on an in-memory store, whose tool calls are answered from the original run's
journal instead of running, and whose model calls are answered from it too unless a new
model is given."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ...effects import CallInfo, Model, ModelQuote, ModelReply, Tool
from ...engine import Engine, StepWithChildren
from ...errors import ToolCallError, UnderwayError
from ...events import JSON
from ...guard.intent import CallIntent
from ._tape import Tape, same_request
from ._trace import TracedCall, TracedModel

if TYPE_CHECKING:
    from ...engine._activation import Activation

OnDivergence = Literal["stop", "stub"]
"""What a replay does at a call the original did not make: ``stop`` there, or answer it
with a stub — the result the original got from the same tool (its next unused call of
that tool), or a ``NoRecordedResult`` failure when the original never called it."""


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where the replay left the original's path: in run ``run_id`` at ``step``, ``kind``
    ``call`` (a tool call the original did not make with these arguments), ``not_run``
    (a call the original made but that never ran there: refused, shadowed, in doubt),
    ``model`` (a model request that differs from the recorded one, or none left),
    ``wait`` (the replay waits for something the original never got) or ``end`` (the
    original run has gone no further: it had not finished)."""

    run_id: str
    step: str
    kind: str
    what: str
    detail: str = ""
    """More about it: the arguments of the calls on both sides (may hold personal data:
    shown through a redactor)."""


class Diverged(BaseException):
    """Stops the replay (a ``BaseException``: step code cannot swallow it)."""

    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.what)
        self.divergence = divergence


class ReplayedFailure(UnderwayError):
    """The failure the original call met, raised again (its error type is the class
    name the journal recorded)."""

    retryable = False


class NoRecordedResult(ReplayedFailure):
    """A stubbed call of a tool the original never called: there is no result to give."""


def _failure(call: TracedCall) -> ReplayedFailure:
    name = call.error or "ReplayedFailure"
    cls: type[ReplayedFailure] = type(
        name if name.isidentifier() else "ReplayedFailure", (ReplayedFailure,), {})
    return cls(call.message or f"failed in the original run ({name})")


@dataclass
class ReplaySession:
    """What a replay's engine answers calls with: a :class:`Tape` per original run
    (``load``: the tape of a run id, None when the original has no such run), what to do
    at a divergence, and the new model (None: recorded responses)."""

    load: Callable[[str], Tape | None]
    on_divergence: OnDivergence = "stop"
    model: Model | None = None
    divergences: list[Divergence] = field(default_factory=list)
    """The divergences answered with stubs (``on_divergence="stub"``)."""
    args: dict[str, JSON] = field(default_factory=dict)
    """The arguments of every call the replay made, by idempotency key."""
    _tapes: dict[str, Tape | None] = field(default_factory=dict)
    _pending: dict[str, CallIntent] = field(default_factory=dict)
    _stubs: dict[str, Tool] = field(default_factory=dict)

    def tape(self, run_id: str) -> Tape | None:
        """The tape of original run ``run_id`` (read once)."""
        if run_id not in self._tapes:
            self._tapes[run_id] = self.load(run_id)
        return self._tapes[run_id]

    def stub(self, tool: Tool) -> Tool:
        """``tool`` with everything the guard and the ledger see, whose function answers
        from the tape. It reads no secret: the guard has judged the tool's secrets
        already, and a replay never needs their values."""
        found = self._stubs.get(tool.name)
        if found is None or found.mutating != tool.mutating:
            # No secret is read and no reconcile hook asked: both would reach outside.
            found = self._stubs[tool.name] = dataclasses.replace(
                tool, fn=self._invoke, wants_call_info=True, takes_args=True, secrets=(),
                reconcile=None)
        return found

    def diverge(self, d: Divergence) -> None:
        """Stop at ``d``, or note it and go on (``stub``)."""
        if self.on_divergence == "stop":
            raise Diverged(d)
        self.divergences.append(d)

    async def _invoke(self, value: Any, info: CallInfo) -> JSON:
        call = self._pending.pop(info.key)
        tape = self.tape(info.run_id)
        name = call.tool.name
        found = tape.match(name, call.args_hash, info.key) if tape is not None else None
        if tape is not None and found is not None and found[1].outcome == "unknown":
            tape.used.add(found[0])
            if not tape.trace.finished and tape.trace.status != "escalated":
                raise Diverged(Divergence(info.run_id, info.step, "end", (
                    f"the original run has gone no further (it is {tape.trace.status}); "
                    f"the outcome of its {name} #{info.index} is not journaled yet")))
            # The original lost track of this call: so does the replay, and the engine
            # settles it as it settled the original's (a person decides).
            raise ToolCallError(name, "OutcomeUnknown", "the original run lost track of "
                                "this call's outcome", retryable=False)
        if tape is not None and found is not None and not found[1].has_result:
            tape.used.add(found[0])
            self.diverge(Divergence(info.run_id, info.step, "not_run", (
                f"{name} #{info.index}: the original made this call but it never ran there "
                f"({found[1].outcome}{': ' + found[1].error if found[1].error else ''}), so "
                "no result is recorded")))
            found = None
        elif found is None:
            if tape is not None and tape.calls_left == 0 and not tape.trace.finished:
                raise Diverged(Divergence(info.run_id, info.step, "end", (
                    f"the original run has gone no further (it is {tape.trace.status}); "
                    f"the replay goes on to call {name}")))
            self.diverge(Divergence(
                info.run_id, info.step, "call",
                f"{name} #{info.index}: the original made no such call", (
                    f"arguments {_short(call.args)}; " + _next_of(tape))))
        if found is None and tape is not None:
            found = tape.same_tool(name)
        if found is None:
            raise NoRecordedResult(f"the original run never called {name}; nothing to stub "
                                   "its result with")
        assert tape is not None
        tape.used.add(found[0])
        if found[1].outcome == "succeeded":
            return found[1].result
        raise _failure(found[1])


def _short(value: JSON, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _next_of(tape: Tape | None) -> str:
    if tape is None:
        return "the original has no such run"
    nxt = next((c for i, c in enumerate(tape.trace.calls) if i not in tape.used), None)
    if nxt is None:
        return "the original made no further tool call"
    shown = _short(nxt.args) if nxt.args is not None else f"args {nxt.args_hash[:12]}"
    return f"the original's next call was {nxt.tool} with {shown}"


class TapeModel:
    """A model that answers with the original run's recorded responses, in order.

    Args:
        session: The replay's session.
        run_id: The original run.
        step: The step asking.
    """

    name = "replay"

    def __init__(self, session: ReplaySession, run_id: str, step: str) -> None:
        self._session, self._run_id, self._step = session, run_id, step

    async def complete(self, request: JSON) -> ModelReply:
        """The next recorded response of the run (a divergence when the request differs
        from the recorded one; the replay stops when none is left)."""
        rec = self._recorded(take=True)
        if not same_request(rec.request, request):
            self._session.diverge(Divergence(self._run_id, self._step, "model", (
                "the model request differs from the recorded one (what the model sees "
                "changed); the recorded response is served as it was")))
        return ModelReply(rec.response, rec.model, rec.tokens_in, rec.tokens_out,
                          rec.cost_usd)

    def quote(self, request: JSON) -> ModelQuote:
        """What the recorded response served next spent: the replay's budgets count the
        original's usage."""
        rec = self._recorded()
        return ModelQuote(rec.tokens_in + rec.tokens_out, rec.cost_usd)

    def _recorded(self, *, take: bool = False) -> TracedModel:
        tape = self._session.tape(self._run_id)
        rec = None if tape is None else tape.next_model() if take else tape.peek_model()
        if rec is None:
            raise Diverged(Divergence(self._run_id, self._step, "model", (
                "the replay asks the model again and the original has no further model "
                "response recorded; replay with --model to ask a model")))
        return rec


class ReplayStep(StepWithChildren):
    """Step execution whose calls are answered from the tape: each call still passes the
    whole guard of the replay's engine — allow-list, schema, budgets, policy, approval —
    and only the tool itself is replaced.

    Args:
        act: The activation the step runs in.
        step: The step's name.
        session: The replay whose tape answers the calls.
    """

    def __init__(self, act: Activation, step: str, *, session: ReplaySession) -> None:
        super().__init__(act, step)
        self._session = session

    async def _execute(self, call: CallIntent) -> JSON:
        session = self._session
        session._pending[call.key] = call
        session.args[call.key] = call.args
        return await super()._execute(dataclasses.replace(call, tool=session.stub(call.tool)))

    async def model(self, model: Model, request: JSON, *, stream: bool = False) -> JSON:
        """A model call answered by the replay's model, else from the tape.

        Args:
            model: The original's model (the replay asks its own, or the tape).
            request: The request.
            stream: Forward the deltas to the replay's live stream.
        """
        session = self._session
        chosen = session.model or TapeModel(session, self.run_id, self.step)
        return await super().model(chosen, request, stream=stream)

    def version(self, change_id: str) -> bool:
        """The original's answer: a change it never asked about came after it, so the
        replay keeps the path the original ran (the old one)."""
        if change_id not in self._act.state.versions:
            tape = self._session.tape(self.run_id)
            if tape is not None:
                self._act.state.versions[change_id] = tape.trace.versions.get(change_id, False)
        return super().version(change_id)

    def value(self, kind: Any, fresh: JSON) -> JSON:
        if self._values >= len(self._act.state.values):
            tape = self._session.tape(self.run_id)
            if tape is not None:
                fresh = tape.value(str(kind), fresh)
        return super().value(kind, fresh)


class ReplayEngine(Engine):
    """An :class:`~underway.engine.Engine` whose steps run as :class:`ReplayStep`."""

    def __init__(self, *args: Any, session: ReplaySession, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.session = session
        self.execution = functools.partial(ReplayStep, session=session)
