"""What a drill runs: the faults, the user's scenario, and the plan its worker processes
read (which run gets which fault, where the logs are, the seed)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel

from ...errors import ConfigurationError
from ...events import JSON
from ...loading import import_object
from ...scheduling.intake import IntakeEvent, Routes

Fault = Literal["crash", "duplicates", "credentials", "partial", "slow"]
FAULTS: tuple[Fault, ...] = ("crash", "duplicates", "credentials", "partial", "slow")
"""Every fault a drill can inject, in the order a report lists them:

* ``crash``: worker processes SIGKILLed at seeded fault points (after an effect ran and
  before it was journaled, mid-commit, before a step), then restarted;
* ``duplicates``: each run started three times at once with one idempotency key (or its
  intake event delivered three times, when the scenario gives one);
* ``credentials``: the secret provider hands a call expired credentials; a service
  reached through :mod:`underway.http` refuses them with 401;
* ``partial``: a service's 2xx answer through :mod:`underway.http` arrives truncated, with
  a field missing, or as an error body under ``200 OK``;
* ``slow``: a tool's dependency answers after the tool's timeout (the effect done, the
  answer late)."""

EXPIRED = ".drill-expired"
"""Appended to a secret's value to make the expired credential a drill hands out."""
CRASH_POINTS = ("append.before_commit", "append.after_commit", "effect.before_run",
                "effect.after_run", "step.before_run", "child.before_create",
                "child.after_create", "signals.after_commit")
"""The fault points a crash drill's workers may be killed at."""


def parse_faults(only: str | None) -> tuple[Fault, ...]:
    """The faults ``--only`` names (comma separated), in :data:`FAULTS` order; all when
    None. An unknown name is a :class:`ConfigurationError` listing the known ones."""
    if only is None:
        return FAULTS
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown or not names:
        what = "unknown fault " + ", ".join(map(repr, unknown)) if unknown else "no fault"
        raise ConfigurationError(f"--only {only!r} names {what}; choose from "
                                 f"{', '.join(FAULTS)}")
    return tuple(f for f in FAULTS if f in names)


def draw(seed: int, *parts: str) -> float:
    """A number in [0, 1) that depends only on the seed and ``parts``: the same drill
    makes the same choices in every process and on every run."""
    digest = hashlib.sha256(":".join((str(seed), *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """What a drill starts, and the world it needs.

    ``input`` is the input of every run, or a function of the run's number returning it
    (runs are numbered from 0); ``flow`` names the flow to start (default: the app's
    first). ``env`` is added to the environment of the drill's worker processes (where
    the app finds the world the scenario made: a data directory, a service's URL).
    ``event`` and ``routes``: an intake event for run ``i`` and the routes that act on
    it — a duplicates drill then delivers the event three times instead of starting the
    run three times.

    A scenario comes from ``--setup module:attribute``: a function of the drill's
    :class:`DrillSite` (its scratch directory and database) returning a ``Scenario``, or
    a context manager yielding one (to start and stop services around the drill).
    """

    input: JSON | BaseModel | Callable[[int], JSON | BaseModel] = None
    flow: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    tenant_id: str = "default"
    event: Callable[[int], IntakeEvent | Mapping[str, Any]] | None = None
    routes: Routes | None = None

    def input_for(self, i: int) -> JSON:
        """The input of run ``i``, as JSON."""
        value = self.input(i) if callable(self.input) else self.input
        return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


@dataclass(frozen=True)
class DrillSite:
    """Where a drill runs, handed to the ``--setup`` function: its scratch directory and
    its scratch database's URL (also ``UNDERWAY_DB`` in its workers' environment)."""

    workdir: Path
    db: str


def load_setup(spec: str | None, site: DrillSite, *, input: JSON = None,
               flow: str | None = None) -> AbstractContextManager[Scenario]:
    """The scenario ``--setup`` names, made for ``site``; without one, a scenario of
    ``input`` and ``flow`` alone."""
    if spec is None:
        return nullcontext(Scenario(input=input, flow=flow))
    fn = import_object(spec, option="--setup", example="myapp.drill:scenario")
    if not callable(fn):
        raise ConfigurationError(f"--setup {spec!r} is a {type(fn).__name__}, not a function "
                                 "of the drill's site")
    try:
        made = fn(site)
    except Exception as exc:
        raise ConfigurationError(
            f"--setup {spec!r}: making the scenario failed: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(made, Scenario):
        return nullcontext(made)
    if isinstance(made, AbstractContextManager):
        return cast(AbstractContextManager[Scenario], made)
    raise ConfigurationError(f"--setup {spec!r} returned a {type(made).__name__}; it must "
                             "return a Scenario or a context manager yielding one")


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What every worker process of one drill reads: the app, the scratch database, which
    run gets which fault, where the logs go, and the knobs of each fault."""

    app: str
    db: str
    workdir: str
    seed: int
    faults: dict[str, Fault]
    """Run id to the fault injected into it (runs not listed get none)."""
    timeout_cap: float = 2.0
    """With ``slow``: every tool's timeout is cut to at most this many seconds."""
    lease_ttl: float = 3.0
    environment: str | None = None
    secrets_env_prefix: str | None = None

    @property
    def executions(self) -> Path:
        """The log of every effect executed (one JSON line each, written as it ends)."""
        return Path(self.workdir) / "executions.jsonl"

    @property
    def injections(self) -> Path:
        """The log of every fault injected and of what the service was asked after."""
        return Path(self.workdir) / "injections.jsonl"

    def save(self, path: Path) -> None:
        """Write the plan as JSON."""
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Plan:
        """Read a plan written by :meth:`save`."""
        return cls(**json.loads(path.read_text(encoding="utf-8")))
