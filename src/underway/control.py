"""Control signals: the reserved names operators' actions travel under to a run's inbox, and
the answers a signed resolution may carry.

The client sends them (:mod:`underway.client`); the executor reads them at the run's next
step boundary (:mod:`underway.engine`). Names starting with ``underway.`` are reserved:
no flow may wait for one.
"""

from __future__ import annotations

from typing import Literal

from .events import JSON

__all__ = ["CANCEL", "CHILD", "RESERVED_PREFIX", "RESOLVE", "RESUME"]

CANCEL = "underway.cancel"
"""Control signal: cancel the run at its next step boundary."""
RESOLVE = "underway.resolve"
"""Control signal: a person resolved the run's escalation."""
RESUME = "underway.resume"
"""Control signal: an operator resumes a dead run."""
CHILD = "underway.child"
"""Control signal: a child run ended (sent by the child's final commit to its parent)."""
RESERVED_PREFIX = "underway."
"""Signal names with this prefix are control signals, never a flow's own."""


def resolution_of(answer: JSON) -> tuple[Literal["succeeded", "failed", "retry"], JSON] | None:
    """The (resolution, result) a signed ``resolve`` decision carries; None when malformed."""
    if not isinstance(answer, dict) or set(answer) - {"resolution", "result"}:
        return None
    resolution = answer.get("resolution")
    if resolution == "succeeded":
        return "succeeded", answer.get("result")
    if resolution in ("failed", "retry"):
        return ("failed" if resolution == "failed" else "retry"), None
    return None


def resumption_of(answer: JSON) -> str | None:
    """The step a signed resume names: ``""`` for where the run stopped; None when the
    answer is no resume."""
    if not isinstance(answer, dict) or answer.get("resolution") != "resume":
        return None
    if set(answer) - {"resolution", "step"}:
        return None
    step = answer.get("step")
    if step is None:
        return ""
    return step if isinstance(step, str) and step else None
