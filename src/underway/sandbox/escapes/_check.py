"""The check: every escape tried on a backend, and the command that checks a host."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from ..backends import why_unavailable
from ..profile import SandboxProfile
from ._catalogue import ESCAPES, Verdict, base_profile

DESCRIPTION = "Escape attempts a sandbox must block, and a check of this host's backends."
"""What ``python -m underway.sandbox.escapes --help`` says the check is."""


@dataclass
class Report:
    """The outcome of every escape on one backend (or why it could not run)."""

    backend: str
    unavailable: str | None = None
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    @property
    def blocked(self) -> int:
        """How many escapes were blocked."""
        return sum(v.blocked for v in self.verdicts.values())

    def summary(self) -> str:
        """``bwrap: blocked 17/17`` or ``docker: unavailable (why)``."""
        if self.unavailable is not None:
            return f"{self.backend}: unavailable, 0 escapes run ({self.unavailable})"
        return f"{self.backend}: blocked {self.blocked}/{len(self.verdicts)}"


async def check(backend: str, names: list[str] | None = None,
                show: Callable[[str], None] | None = None, *,
                image: str | None = None) -> Report:
    """Run the escapes on ``backend``.

    Args:
        backend: The backend to check: ``bwrap``, ``docker`` or ``none``.
        names: Only the escapes of these names (None or empty: all of them).
        show: Called with a line on each escape's verdict as it comes.
        image: The Docker image the escapes run in (None: the profile's default).

    Returns:
        The verdict on each escape, or why the backend could not run them.
    """
    profile = base_profile(backend, image)
    report = Report(backend, why_unavailable(backend, profile))
    if report.unavailable is not None:
        return report
    for esc in ESCAPES:
        if names and esc.name not in names:
            continue
        try:
            verdict = await esc.attempt(profile)
        except Exception as exc:
            verdict = Verdict(False, f"the attempt itself failed: {type(exc).__name__}: {exc}")
        report.verdicts[esc.name] = verdict
        if show is not None:
            state = "blocked" if verdict.blocked else "NOT BLOCKED"
            show(f"{backend:<7} {esc.name:<21} {state:<12} {verdict.evidence}")
    return report


def main(argv: list[str] | None = None) -> int:
    """Check the backends; exit 1 if an available one let an escape through."""
    parser = argparse.ArgumentParser(prog="python -m underway.sandbox.escapes",
                                     description=DESCRIPTION)
    parser.add_argument("--backend", action="append", choices=["bwrap", "docker", "none"],
                        help="backend to check (repeatable; default: bwrap and docker)")
    parser.add_argument("--only", default="", help="comma-separated escape names: " +
                        ", ".join(e.name for e in ESCAPES))
    parser.add_argument("--image", default=None,
                        help="Docker image to run in (needs bash, coreutils and python3; "
                        f"default {SandboxProfile().image})")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - {e.name for e in ESCAPES}
    if unknown:
        parser.error(f"unknown escapes {sorted(unknown)}")
    if "none" in (args.backend or []):
        parser.error("backend 'none' isolates nothing; there is nothing to check")

    def show(line: str) -> None:
        print(line, flush=True)

    reports = [asyncio.run(check(b, names, show, image=args.image))
               for b in args.backend or ["bwrap", "docker"]]
    print()
    for report in reports:
        print(report.summary())
    leaked = any(r.unavailable is None and r.blocked < len(r.verdicts) for r in reports)
    return 1 if leaked else 0
