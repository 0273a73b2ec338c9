"""Re-running a parked run's current step against new code, with nothing but its journal:
each call the step makes is answered with the call the journal records at that position,
and must be the same call (tool and arguments) — exactly what a worker running the new
code would require of it. Nothing is written and no tool or model is called."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ...effects import Model, Tool, args_hash
from ...engine import Registry, child_run_id
from ...errors import ConfigurationError, ResultInvalid, ToolCallError
from ...events import JSON
from ...flow import ChildOutcome, Flow, RunContext
from ...journal.state import RunState
from ...labels import check_labels
from ...lineage import Lineage


class _Halt(BaseException):
    """The re-run reached the end of what the journal records: everything so far matched.
    A ``BaseException``, so step code that catches ``Exception`` cannot swallow it."""


class _Broken(BaseException):
    """The re-run found what a worker running the new code would stop on."""

    def __init__(self, kind: str, problem: str) -> None:
        super().__init__(problem)
        self.kind = kind
        self.problem = problem


@dataclass(frozen=True, slots=True)
class Rerun:
    """What re-running a step found: ``ok``, or the ``kind`` of problem and what it is
    (``nondeterminism``, ``arguments``, ``result``, ``error``, ``timeout``)."""

    ok: bool
    kind: str = ""
    problem: str = ""
    calls: int = 0
    """How many journaled calls the re-run matched."""
    error_type: str | None = None
    """The type of the exception the step raised (kind ``error``)."""


class RecordedStep:
    """A :class:`~underway.flow.StepRuntime` that answers from the journal alone.

    Args:
        state: The run's state.
        step: The step re-run.
        tools: The new code's tools.
        resumed: Re-run it as ``underway runs resume`` would: its failed calls run again.
    """

    def __init__(self, state: RunState, step: str, tools: Registry, *,
                 resumed: bool = False) -> None:
        self._s = state
        self._tools = tools
        self._resumed = resumed
        self.run_id, self.tenant_id, self.step = state.run_id, state.tenant_id, step
        self.attempt = state.attempt
        self.idempotency_key = state.idempotency_key
        self.lineage = state.lineage
        self.signal = state.signal
        self.timed_out = state.timed_out
        self.matched = 0
        self.child_taint = list(state.child_taint)
        self._calls = 0
        self._values = 0
        self._starts = 0

    def clock(self) -> float:
        """The time of the run's last event (a fresh value is never journaled here)."""
        return self._s.updated_at

    def _next(self, kind: str, shown: str, h: str) -> Any:
        """The journaled record of the next call, checked against ``kind`` and hash ``h``;
        halts past the journal."""
        index = self._calls
        self._calls += 1
        rec = self._s.call(index)
        if rec is None or (rec.status == "retry" and not rec.tool):
            raise _Halt
        if rec.tool != kind or (h and rec.args_hash and rec.args_hash != h):
            journaled = f"{rec.tool}(args {rec.args_hash[:12]})" if rec.args_hash \
                else rec.tool
            raise _Broken("nondeterminism", (
                f"step {self.step!r} call #{index} is now {shown}, but the journal records "
                f"{journaled}: a worker would stop the run (non-determinism). Keep the old "
                "call for runs on the old path with ctx.version (docs/versioning.md)"))
        self.matched += 1
        return rec

    async def call(
        self, tool: Tool | str, args: JSON, *, labels: frozenset[str], evidence: JSON,
        risks: list[str], typed: bool = False, summary: str | None = None,
    ) -> Any:
        """The journaled outcome of the call at this position, when it is the same call.

        Args:
            tool: The tool, or its name.
            args: The call's arguments.
            labels: Unused: nothing is guarded again.
            evidence: Unused.
            risks: Unused.
            summary: Unused.
            typed: Give the result as the tool's result model.
        """
        try:
            t = self._tools.tool(tool)
        except ConfigurationError:
            raise _Broken("nondeterminism", (
                f"step {self.step!r} calls tool {tool!r}, which the new code does not "
                "register")) from None
        try:
            h = args_hash(t.name, args)
        except (TypeError, ValueError) as exc:
            raise _Broken("error", f"step {self.step!r} passes {t.name!r} arguments that "
                                   f"are not JSON: {exc}") from None
        rec = self._next(t.name, f"{t.name}(args {h[:12]})", h)
        if rec.status in ("awaiting", "approved", "started", "retry") or self._again(rec):
            # The call runs (again) under the new code: its arguments must fit the tool.
            if t.args_model is not None:
                try:
                    t.args_model.model_validate(args)
                except ValidationError as exc:
                    raise _Broken("arguments", (
                        f"step {self.step!r} call #{self._calls - 1} ({t.name}, "
                        f"{rec.status}) has arguments that no longer fit "
                        f"{t.args_model.__name__}: {_fields(exc)}")) from None
            raise _Halt
        if rec.status == "failed":
            raise ToolCallError(t.name, rec.error_type or "Error", rec.message or "",
                                retryable=rec.retryable)
        if not typed or t.result_model is None:
            return rec.result
        try:
            return t.parse_result(rec.result, key=rec.key)
        except ResultInvalid as exc:
            raise _Broken("result", (
                f"step {self.step!r}: the journaled result of {t.name} (call "
                f"#{self._calls - 1}) no longer fits {t.result_model.__name__}: "
                f"{', '.join(exc.fields)}")) from None

    async def ask(self, question: str, *, context: JSON, role: str | None,
                  expires_in: float | None = None) -> JSON:
        """The journaled answer to the question at this position.

        Args:
            question: Unused: nothing is asked.
            context: Unused.
            role: Unused.
            expires_in: Unused.
        """
        rec = self._next("ask", "a question (ctx.ask)", "")
        if self._again(rec):
            raise _Halt
        if rec.status == "succeeded":
            return rec.result
        if rec.status == "failed":
            raise ToolCallError("ask", rec.error_type or "QuestionExpired", rec.message or "",
                                retryable=False)
        raise _Halt

    def _again(self, rec: Any) -> bool:
        """True when a resume runs this journaled call again (it failed)."""
        return self._resumed and rec.status == "failed"

    async def model(self, model: Model, request: JSON, *, stream: bool = False) -> JSON:
        """The journaled response of the model call at this position.

        Args:
            model: Unused: no model is asked.
            request: Unused.
            stream: Unused: a journaled call streams nothing.
        """
        rec = self._next("model", "a model call", "")
        if rec.status != "succeeded":
            raise _Halt
        return rec.result

    def note(self, event: Any) -> bool:
        index = self._values
        self._values += 1
        return index >= len(self._s.values)

    def value(self, kind: Any, fresh: JSON) -> JSON:
        index = self._values
        self._values += 1
        return self._s.values[index] if index < len(self._s.values) else fresh

    def label(self, labels: dict[str, Any], sensitive: bool) -> None:
        # Labels change nothing a run does next: the check has nothing to compare.
        check_labels(labels, field="ctx.label")

    def version(self, change_id: str) -> bool:
        known = self._s.versions.get(change_id)
        if known is not None:
            return known
        return not (len(self._s.calls) > self._calls or len(self._s.values) > self._values)

    async def start_child(
        self, flow: Flow[Any, Any] | str, input: JSON, *, key: str | None, detached: bool,
        queue: str | None, lineage: Lineage | None = None, taint: tuple[str, ...] = (),
    ) -> str:
        """The run id of the child the journal records at this position.

        Args:
            flow: Unused: nothing is started.
            input: Unused.
            key: The child's key; None means its position in the step.
            detached: Unused.
            queue: Unused.
            lineage: Unused.
            taint: Unused.
        """
        position = self._starts
        self._starts += 1
        key = key if key is not None else f"{self._s.steps_completed}:{self.step}:{position}"
        run_id = child_run_id(self.tenant_id, self.run_id, key)
        if run_id not in self._s.children:
            raise _Halt
        return run_id

    async def wait_child(self, run_id: str) -> ChildOutcome:
        child = self._s.children.get(run_id)
        if child is None or child.status is None:
            raise _Halt
        self.child_taint += [src for src in child.tainted_by if src not in self.child_taint]
        return ChildOutcome(run_id=run_id, status=child.status, result=child.result,
                            error=child.error, tainted_by=list(child.tainted_by),
                            marks=[dict(m) for m in child.marks])


def _fields(exc: ValidationError) -> str:
    return ", ".join(sorted({".".join(map(str, e["loc"])) or "(root)" for e in exc.errors()}))


async def rerun_step(
    flow: Flow[Any, Any], state: RunState, tools: Registry, *, timeout: float = 10.0,
    resumed: bool = False,
) -> Rerun:
    """Run the run's current step with the new ``flow``'s code against its journal.

    See the module's docstring. It is ok when every call it makes matches the journal, up to
    the end of what the journal records (or until the step returns first).

    Args:
        flow: The new flow.
        state: The run's state.
        tools: The new code's tools.
        timeout: Seconds the step may take.
        resumed: Re-run it as a resume of a dead run would: its failed calls run again.
    """
    step = flow.resolve_step(str(state.step))
    runtime = RecordedStep(state, step, tools, resumed=resumed)
    try:
        ctx: RunContext[Any, Any] = RunContext(
            runtime, flow.parse_state(state.state), _input(flow, state.input),
            taint_of=flow.taint_of)
        async with asyncio.timeout(timeout):
            await flow.get_step(step)(ctx)
    except _Halt:
        pass
    except _Broken as broken:
        return Rerun(False, broken.kind, broken.problem, runtime.matched)
    except TimeoutError:
        return Rerun(False, "timeout", (
            f"step {step!r} did not reach the end of its journaled calls within {timeout:g}s "
            "(does it wait on something outside ctx?)"), runtime.matched)
    except Exception as exc:
        return Rerun(False, "error", (
            f"step {step!r} raises {type(exc).__name__} when run again with its journaled "
            f"calls: {exc}"), runtime.matched, type(exc).__name__)
    return Rerun(True, calls=runtime.matched)


def _input(flow: Flow[Any, Any], data: JSON) -> BaseModel:
    parsed: BaseModel = flow.input_type.model_validate(data)
    return parsed

