"""Child runs: a step starts another flow's run once (``ctx.start``) and waits for its end
(``ctx.wait_for``) holding no worker. How a child's end reaches its parent, and a cancel a
cancelled run's children: :mod:`._outbox`."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from .. import events as ev
from .. import faults
from ..client import StartOptions
from ..client._starting import new_run
from ..control import CHILD as CHILD_SIGNAL
from ..errors import ConfigurationError, NonDeterminismError, UnderwayError
from ..events import JSON
from ..flow import ChildOutcome, Flow
from ..labels import check_labels, label_kind
from ..lineage import Lineage
from ._calls import StepExecution
from ._inbox import pending_signals
from ._outbox import child_finished
from ._stops import Suspend, unswallowed
from ._versions import decide_version

if TYPE_CHECKING:
    from ._activation import Activation

CHILD_NAMESPACE = uuid.UUID("6f0c3a52-8d1e-4c39-9a57-2b1f6c0de7a1")
"""The namespace a child's run id is derived in (from tenant, parent run and key)."""


def child_run_id(tenant_id: str, parent_run_id: str, key: str) -> str:
    """The run id of the child ``parent_run_id`` starts under ``key``.

    It is the same on every re-run of the step. So a crash between journaling and creating
    it loses nothing.

    Args:
        tenant_id: The tenant.
        parent_run_id: The parent run.
        key: The child's key within the parent.
    """
    return str(uuid.uuid5(CHILD_NAMESPACE, f"{tenant_id}\x00{parent_run_id}\x00{key}"))


class StepWithChildren(StepExecution):
    """The engine side of a :class:`~underway.flow.RunContext`, with child runs."""

    def __init__(self, act: Activation, step: str) -> None:
        super().__init__(act, step)
        self._starts = 0
        self._received: list[str] = []

    @property
    def lineage(self) -> Lineage:
        """What the run inherited and passes on (:attr:`RunContext.lineage`)."""
        return self._act.state.lineage

    @property
    def child_taint(self) -> list[str]:
        """Where the untrusted content of the child outcomes the run received came from:
        in the steps it completed, then in this one (:attr:`RunContext.child_taint`)."""
        return list(dict.fromkeys([*self._act.state.child_taint, *self._received]))

    def label(self, labels: dict[str, Any], sensitive: bool) -> None:
        """Journal the labels that change the run's (:meth:`RunContext.label`): a re-run
        step that sets them again journals nothing.

        Args:
            labels: Names and values.
            sensitive: They are shown redacted.
        """
        have = self._act.state.lineage
        checked = check_labels(labels, field="ctx.label",
                               present=len(set(have.labels) - set(labels)))
        fresh = {k: v for k, v in checked.items()
                 if k not in have.labels or label_kind(v) != label_kind(have.labels[k])
                 or have.labels[k] != v or (sensitive and k not in have.sensitive_labels)}
        if fresh:
            self._act.buffer(ev.RunLabeled(
                labels=fresh, sensitive_fields=sorted(fresh) if sensitive else None))

    @unswallowed
    async def start_child(
        self, flow: Flow[Any, Any] | str, input: JSON, *, key: str | None, detached: bool,
        queue: str | None, lineage: Lineage | None = None, taint: tuple[str, ...] = (),
    ) -> str:
        act, svc = self._act, self._act.services
        s = act.state
        position = self._starts
        self._starts += 1
        if key is not None and not key:
            raise ConfigurationError("a child run's key must not be empty")
        key = key if key is not None else f"{self.ordinal}:{self.step}:{position}"
        name = flow.name if isinstance(flow, Flow) else flow
        code = flow if isinstance(flow, Flow) else svc.registry.flows.get(name)
        if code is None:
            raise ConfigurationError(
                f"step {self.step!r} of run {self.run_id} starts a run of flow {name!r}, "
                f"which this engine does not have; known: {sorted(svc.registry.flows)}"
            )
        run_id = child_run_id(self.tenant_id, self.run_id, key)
        known = s.children.get(run_id)
        if known is not None and known.flow != name:
            self.broken = NonDeterminismError(
                self.run_id, self.step, position, f"start({known.flow})",
                f"start({name})",
            )
            raise self.broken
        # What the child inherits, in one record: this run's lineage, the taint its
        # context and the child outcomes it received took in since it started, its shadow
        # mode now, and what the start adds (never less than this run has).
        inherited = s.lineage.descend(
            self.run_id, lineage, taint=(*self.child_taint, *taint),
            shadow=svc.guard.shadow_for(svc.flow(s.flow)),
        )
        options = StartOptions(
            tenant_id=self.tenant_id, run_id=run_id, idempotency_key=f"child:{self.run_id}:{key}",
            queue=queue or act.queue, principal=s.principal, roles=s.roles, lineage=inherited,
        )
        new = new_run(svc.journal, code, name, input, options, now=svc.clock.now(),
                      run_id=run_id, parent_run_id=self.run_id)
        if known is None:
            # The intent, durable before the child exists: a cancel of this run from now on
            # reaches the child, created or not yet.
            act.buffer(ev.ChildStarted(run_id=run_id, flow=name, key=key, detached=detached))
            await act.commit()
        faults.point("child.before_create")
        # Idempotent by key: a re-run of the step finds the child created before a crash.
        # A worker serving the engine with a free slot takes the child at once.
        await act.store(svc.create_run, new)
        faults.point("child.after_create")
        return run_id

    def version(self, change_id: str) -> bool:
        """Whether the run takes the new path of ``change_id`` (see
        :meth:`~underway.flow.RunContext.version`)."""
        return decide_version(self._act, change_id, self.step, calls=self._calls,
                              values=self._values)

    @unswallowed
    async def wait_child(self, run_id: str) -> ChildOutcome:
        act, svc = self._act, self._act.services
        s = act.state
        child = s.children.get(run_id)
        if child is None:
            raise ConfigurationError(
                f"step {self.step!r} of run {self.run_id} waits for run {run_id}, which is "
                "not a child of this run: wait only for runs the run started with ctx.start"
            )
        if not child.ended:
            # The child may have ended since the inbox was read: its word waits there.
            for sig, payload in await act.store(pending_signals, svc.store, self.tenant_id,
                                                self.run_id, None):
                if sig.name == CHILD_SIGNAL and sig.signal_id not in act.consumed \
                        and not isinstance(payload, UnderwayError):
                    finished = child_finished(s, payload)
                    if finished is not None and finished.run_id == run_id:
                        act.consumed.append(sig.signal_id)
                        act.buffer(finished)
        child = s.children[run_id]  # the fold replaced the record if the end was buffered
        if child.status is None:
            act.buffer(ev.ChildAwaited(run_id=run_id))
            raise Suspend
        # The outcome's taint is now the run's: what the step does with it was shaped by
        # it. The step's end journals it (StepCompleted.child_taint).
        self._received += [src for src in child.tainted_by if src not in self.child_taint]
        return ChildOutcome(run_id=run_id, status=child.status, result=child.result,
                            error=child.error, tainted_by=list(child.tainted_by),
                            marks=[dict(m) for m in child.marks])
