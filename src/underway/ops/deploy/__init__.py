"""Safe deploys for parked runs: :func:`check_deploy` checks every unfinished run of a
database against new code before it is deployed (``underway deploy check``).

A run parked at a step boundary needs its flow, its current step (or an alias of it, see
:meth:`~underway.flow.Flow.alias`) and a state and input that fit the new models (defaults
and ``mode="before"`` validators — upcasters — applied). A run parked mid-step — waiting
for an approval, a retry timer, a person, or interrupted by a crash — also needs its step
to make the same calls as the journal records when the new code runs it again: the check
runs the step with the journal's answers (:class:`RecordedStep`), nothing written and no
tool or model called, and reports the first difference. Runs that had stopped already
(dead or escalated) are judged apart (:class:`StoppedRun`): one the new code continues, or
stops again for the reason it stopped, is no breakage. See docs/versioning.md and
docs/evaluation.md.
"""

from __future__ import annotations

from ._check import BATCH, STOPPED, UNFINISHED, Breakage, DeployReport, StoppedRun, check_deploy
from ._rerun import RecordedStep, Rerun, rerun_step

__all__ = [
    "BATCH",
    "STOPPED",
    "UNFINISHED",
    "Breakage",
    "DeployReport",
    "RecordedStep",
    "Rerun",
    "StoppedRun",
    "check_deploy",
    "rerun_step",
]
