"""The client's operator actions that need no signature: cancelling a run, resolving an
escalation and resuming a dead run.

Where the deployment settles runs only with signed resolutions (``[approvals]
signed_resolutions``), both refuse here, before anything is sent. This is the one place
the rule is checked before the workers: the CLI, the HTTP API, the console and any Python
caller reach runs through this client, so each refuses the same way, with the same
message (:class:`~underway.errors.SignedResolutionRequired`)."""

from __future__ import annotations

import copy
from typing import Any, Protocol, TypeVar

from .. import inputs
from ..control import CANCEL, RESOLVE, RESUME
from ..errors import ConfigurationError, SignedResolutionRequired
from ..events import JSON
from ..flow import Flow
from ..store.base import FINAL, RunRecord
from ._transport import Transport


class _Steering(Protocol):
    """What settling needs of the client."""

    _transport: Transport
    _owns: bool
    flows: dict[str, Flow[Any, Any]]
    signed_resolutions: bool

    def get_run(self, run_id: str, *, tenant_id: str = "default") -> RunRecord: ...


C = TypeVar("C", bound=_Steering)


def _unsigned(client: _Steering, run_id: str, tenant_id: str, what: str, status: str,
              why: str) -> RunRecord:
    """The row of a run an unsigned ``what`` may settle: refused up front when only
    signed resolutions count, or when the run is not ``status`` (``why`` says why)."""
    row = client.get_run(run_id, tenant_id=tenant_id)
    if client.signed_resolutions:
        raise SignedResolutionRequired(run_id, what)
    if row.status != status:
        raise ConfigurationError(f"run {run_id} is {row.status}, not {status}: {why}")
    return row


class Settling:
    """What :class:`~underway.client.Client` does to cancel and settle runs without a
    signature. Each takes a ``signal_id``: sent once per id, as :meth:`Client.signal`
    (bulk operations pass one per run and state, so a repeat sends nothing)."""

    signed_resolutions: bool

    def signed_only(self: C) -> C:
        """This client if it refuses unsigned resolutions and resumes, else a copy of it
        on the same store (or server) that does. The copy never closes it: this client
        still owns it."""
        if self.signed_resolutions:
            return self
        strict = copy.copy(self)
        strict._owns = False
        strict.signed_resolutions = True
        return strict

    def cancel(
        self: _Steering, run_id: str, *, by: str, reason: str = "",
        tenant_id: str = "default", signal_id: str | None = None,
    ) -> bool:
        """Ask for the run to be cancelled at its next step boundary; False when
        ``signal_id`` was sent before.

        Args:
            run_id: The run.
            by: Who asks; journaled.
            reason: Why; journaled.
            tenant_id: The run's tenant.
            signal_id: Sent once per id (default: a new one).
        """
        inputs.text("reason", reason)
        tenant_id = self._transport.tenant(tenant_id)
        row = self.get_run(run_id, tenant_id=tenant_id)
        if row.status in FINAL:
            raise ConfigurationError(f"run {run_id} is already {row.status}; nothing to "
                                     "cancel")
        return self._transport.control(tenant_id, run_id, CANCEL,
                                       {"by": by, "reason": reason}, signal_id, by)

    def resolve(
        self: _Steering,
        run_id: str,
        *,
        resolution: str,
        by: str,
        result: JSON = None,
        tenant_id: str = "default",
        signal_id: str | None = None,
    ) -> bool:
        """Resolve an escalation; False when ``signal_id`` was sent before.

        It is unsigned. A worker with ``signed_resolutions`` refuses an unsigned one in any case
        (``SignalIgnored``). To sign one, use :meth:`submit_decision` with a ``resolve``
        decision.

        Args:
            run_id: The run.
            resolution: The effect ``succeeded`` (with ``result``), ``failed``, or may be
                ``retry``-ed.
            by: Who resolves it.
            result: The effect's result, when it succeeded.
            tenant_id: The run's tenant.
            signal_id: Sent once per id (default: a new one).

        Raises:
            SignedResolutionRequired: This client has :attr:`signed_resolutions`; nothing is
                sent.
        """
        if resolution not in ("succeeded", "failed", "retry"):
            raise ConfigurationError(
                f"resolution must be 'succeeded', 'failed' or 'retry', not {resolution!r}"
            )
        tenant_id = self._transport.tenant(tenant_id)
        _unsigned(self, run_id, tenant_id, "resolution", "escalated",
                  "there is nothing to resolve")
        return self._transport.control(tenant_id, run_id, RESOLVE,
                                       {"resolution": resolution, "result": result, "by": by},
                                       signal_id, by)

    def resume(
        self: _Steering, run_id: str, *, by: str, step: str | None = None,
        tenant_id: str = "default", signal_id: str | None = None,
    ) -> bool:
        """Resume a dead run, at ``step`` or where it stopped; False when ``signal_id`` was
        sent before.

        Its failed calls are tried again, each through the whole guard; completed ones are not.

        Args:
            run_id: The run.
            by: Who resumes it.
            step: The step to resume at; None means where it stopped.
            tenant_id: The run's tenant.
            signal_id: Sent once per id (default: a new one).

        Raises:
            SignedResolutionRequired: This client has :attr:`signed_resolutions`. It is
                unsigned, so nothing is sent.
        """
        tenant_id = self._transport.tenant(tenant_id)
        row = _unsigned(self, run_id, tenant_id, "resume", "dead",
                        "only dead runs can be resumed")
        if step is not None and row.flow in self.flows:
            # (Without the flow's code this is left to the worker: an unknown step stops
            # the run dead again, naming the step.)
            self.flows[row.flow].get_step(step)
        return self._transport.control(tenant_id, run_id, RESUME, {"by": by, "step": step},
                                       signal_id, by)
