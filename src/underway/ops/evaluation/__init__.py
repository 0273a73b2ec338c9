"""Measuring agents from their journals: ``underway eval`` and ``underway drift``.

:func:`evaluate` measures a tenant's runs created in a window — how many completed, how
fast, how often a person had to step in and who decided, what the guard stopped and
whether anything unsafe ran anyway, whether any effect happened twice, how runs recovered
from crashes, and what they cost — per flow, per tool and per model.
:func:`measure_drift` compares a recent window with a baseline before it — tool error and
timeout rates, schema failures, policy denials and approvals, the model's choice of
tools, tokens and cost per task — and says what moved beyond its threshold.

Both read the journal alone (the run index only finds the runs), a few kinds of event at a
time, each event's data opened without resolving its blobs; each says what it read
(:class:`Reading`). docs/evaluation.md explains every figure.
"""

from __future__ import annotations

from ._drift import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_SAMPLES,
    DEFAULT_THRESHOLDS,
    DRIFT_KINDS,
    Drift,
    DriftMetric,
    measure_drift,
)
from ._eval import (
    TAINT_RULES,
    Cost,
    Duplicate,
    Effects,
    Evaluation,
    FlowFigures,
    ModelFigures,
    Outcomes,
    Recovery,
    Safety,
    Takeover,
    ToolFigures,
    UnsafeCall,
    evaluate,
)
from ._html import eval_html
from ._reading import Reading
from ._runs import EVAL_KINDS
from ._stats import Spread
from ._text import drift_notice, drift_text, eval_text

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_MIN_SAMPLES",
    "DEFAULT_THRESHOLDS",
    "DRIFT_KINDS",
    "EVAL_KINDS",
    "TAINT_RULES",
    "Cost",
    "Drift",
    "DriftMetric",
    "Duplicate",
    "Effects",
    "Evaluation",
    "FlowFigures",
    "ModelFigures",
    "Outcomes",
    "Reading",
    "Recovery",
    "Safety",
    "Spread",
    "Takeover",
    "ToolFigures",
    "UnsafeCall",
    "drift_notice",
    "drift_text",
    "eval_html",
    "eval_text",
    "evaluate",
    "measure_drift",
]
