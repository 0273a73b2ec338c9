"""Counterfactual replay: a historical run executed again against new code, a new model or
a new policy, without side effects (``underway replay``).

:func:`replay_run` re-runs one run on an in-memory store with the real engine — guard,
policy, approvals, budgets, the effect ledger — whose tools never run: each call is
answered with the original's journaled result of the same call, matched by call order and
tool and arguments (:class:`Tape`). Model calls are answered from the journal too, unless a
new model is given. A call the original did not make is a :class:`Divergence`, answered as
``on_divergence`` says: ``stop`` there, or ``stub`` it. Nothing is written to the original
run. Both runs' decisions are read from their journals into a :class:`Trace` — tool
choices, arguments, policy outcomes, approvals needed, outcomes, money moved, model cost,
how the run ended — and compared (:class:`Change`, :func:`rows`). :func:`replay_runs`
replays many runs of a flow. See docs/evaluation.md.
"""

from __future__ import annotations

from ._diff import CHANGES, Change, Row, align, changes, rows
from ._engine import (
    Diverged,
    Divergence,
    NoRecordedResult,
    OnDivergence,
    ReplayedFailure,
    ReplayEngine,
    ReplaySession,
    ReplayStep,
    TapeModel,
)
from ._model import model_from_spec
from ._replay import BatchEntry, ReplayResult, replay_run, replay_runs
from ._tape import Tape
from ._trace import APPROVER, Trace, TracedCall, TracedModel, Waited

__all__ = [
    "APPROVER",
    "CHANGES",
    "BatchEntry",
    "Change",
    "Diverged",
    "Divergence",
    "NoRecordedResult",
    "OnDivergence",
    "ReplayEngine",
    "ReplayResult",
    "ReplaySession",
    "ReplayStep",
    "ReplayedFailure",
    "Row",
    "Tape",
    "TapeModel",
    "Trace",
    "TracedCall",
    "TracedModel",
    "Waited",
    "align",
    "changes",
    "model_from_spec",
    "replay_run",
    "replay_runs",
    "rows",
]
