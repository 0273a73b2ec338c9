"""Where a run goes when a step returns (:data:`Next`: goto, sleep, wait, done, fail),
and how a child run ended (:class:`ChildOutcome`). :mod:`underway.flow` holds them
beside the steps that return them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from .errors import ConfigurationError
from .events import JSON


@dataclass(frozen=True, slots=True)
class Goto:
    """Continue with ``step``."""

    step: str


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds`` on a durable timer, then continue with ``then``."""

    seconds: float
    then: str


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait for signal ``signal`` (at most ``timeout`` seconds), then continue with ``then``."""

    signal: str
    timeout: float | None
    then: str


@dataclass(frozen=True, slots=True)
class Done:
    """Finish the run with ``result``. ``marks``: the parts of it that trusted sources do
    not account for, checked as it is made (:func:`checked_marks`: a bad one raises
    :class:`~underway.errors.ConfigurationError`), journaled on
    :attr:`~underway.events.RunCompleted.marks`."""

    result: JSON
    marks: tuple[dict[str, JSON], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "marks", checked_marks(self.marks))


@dataclass(frozen=True, slots=True)
class Fail:
    """Fail the run with ``reason``."""

    reason: str


Next = Goto | Sleep | Wait | Done | Fail
"""What a step returns: where the run goes next."""

_MARK_KEYS = ("path", "sources", "repeats")


def checked_marks(marks: Iterable[Any] | None) -> tuple[dict[str, JSON], ...]:
    """The marks of a run's answer, checked: each ``{"path": str, "sources": [str],
    "repeats": bool}`` (a :class:`~underway.guard.provenance.Mark` or its ``to_json()``).

    A mark names a part of the result and where it came from: never a value, so erasing a
    subject's data has nothing to remove from it.

    Args:
        marks: The marks (None: none).

    Raises:
        ConfigurationError: ``marks`` is not a list of such marks; the message names what
            is wrong.
    """
    if marks is None:
        return ()
    if isinstance(marks, str | bytes | Mapping) or not isinstance(marks, Iterable):
        raise ConfigurationError(
            f"marks must be a list of {{path, sources, repeats}}, not {type(marks).__name__}")
    out: list[dict[str, JSON]] = []
    for i, mark in enumerate(marks):
        to_json = getattr(mark, "to_json", None)
        if callable(to_json) and not isinstance(mark, Mapping):
            mark = to_json()
        if not isinstance(mark, Mapping):
            raise ConfigurationError(
                f"mark {i} must be a {{path, sources, repeats}} object, not "
                f"{type(mark).__name__}")
        missing = [k for k in _MARK_KEYS if k not in mark]
        extra = sorted(str(k) for k in mark if k not in _MARK_KEYS)
        if missing or extra:
            raise ConfigurationError(
                f"mark {i} " + "; ".join(
                    ([f"lacks {', '.join(missing)}"] if missing else [])
                    + ([f"has unknown keys {', '.join(extra)}"] if extra else []))
                + " (a mark is {path, sources, repeats})")
        path, sources, repeats = mark["path"], mark["sources"], mark["repeats"]
        if not isinstance(path, str) or not path.strip():
            raise ConfigurationError(f"mark {i}: path must be a non-empty string, not {path!r}")
        if isinstance(sources, str | bytes) or not isinstance(sources, list | tuple) or not all(
                isinstance(src, str) and src for src in sources):
            raise ConfigurationError(
                f"mark {i} ({path}): sources must be a list of source names, not {sources!r}")
        if not isinstance(repeats, bool):
            raise ConfigurationError(
                f"mark {i} ({path}): repeats must be true or false, not {repeats!r}")
        out.append({"path": path, "sources": list(sources), "repeats": repeats})
    return tuple(out)


def _seconds(duration: float | timedelta) -> float:
    return duration.total_seconds() if isinstance(duration, timedelta) else float(duration)


def _step_name(target: str | Callable[..., Any]) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How a child run ended (what :meth:`RunContext.wait_for` returns): ``completed``
    with ``result``, or ``failed`` or ``cancelled`` with ``error`` saying why.
    ``tainted_by``: where the untrusted content that shaped its result came from (its
    :attr:`~underway.events.RunCompleted.tainted_by`; empty: none did). The run that
    receives it is shaped by that content too: its own result names those sources.
    ``marks``: the parts of its result that trusted sources do not account for (its
    :attr:`~underway.events.RunCompleted.marks`; paths into its result)."""

    run_id: str
    status: Literal["completed", "failed", "cancelled"]
    result: JSON = None
    error: str | None = None
    tainted_by: list[str] = field(default_factory=list)
    marks: list[dict[str, JSON]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the child completed."""
        return self.status == "completed"
