"""What an audit reports: one :class:`Finding` per thing found wrong, and the
:class:`Report` of a whole audit."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Finding:
    """Something an audit found wrong: in run ``run_id`` of ``tenant_id`` at ``seq`` (the
    first bad event, when one can be named), or in the anchor log when ``run_id`` is None.
    """

    tenant_id: str | None
    run_id: str | None
    seq: int | None
    reason: str

    def describe(self) -> str:
        """One line naming where and why."""
        if self.run_id is None:
            return f"TAMPERED anchor log: {self.reason}"
        at = f" at seq {self.seq}" if self.seq is not None else ""
        return f"TAMPERED run {self.run_id} in tenant {self.tenant_id!r}{at}: {self.reason}"


@dataclass(slots=True)
class Report:
    """The outcome of an audit: what was checked and every finding, in order."""

    runs: int = 0
    """Runs checked (each with a row, events, or an anchored head)."""
    events: int = 0
    """Events read."""
    tenants: set[str] = field(default_factory=set)
    """Tenants whose runs were checked."""
    anchors: int = 0
    """Anchor records whose signature verified."""
    forgotten: int = 0
    """Anchored runs retention forgot: their anchored heads are in the forget log."""
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether nothing was found wrong."""
        return not self.findings

    @property
    def bad_runs(self) -> int:
        """How many distinct runs have at least one finding."""
        return len({(f.tenant_id, f.run_id) for f in self.findings if f.run_id is not None})
