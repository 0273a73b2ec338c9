"""The audit of forgotten runs: each tenant's forget log checked as a hash chain, and an
anchored run that is gone told apart as forgotten (its anchored head is the one the log
names) or lost (no line names it: reported as a run that is gone).

A forgotten run's events are gone, so only its last head is kept: an anchored head at the
seq the log names must be the log's head; one at a later seq, or the same seq with
another hash, is a finding. An anchored head at an earlier seq cannot be checked any more
(the events that linked it to the last head are gone) and is taken as it stands.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...store.base import ForgottenRun, Store
from ...store.retention import forget_genesis, forget_hash
from ._findings import Finding

if TYPE_CHECKING:
    from ._verify import AnchoredHead

PAGE = 1000
"""Forget log lines read at a time."""


@dataclass(slots=True)
class ForgetLogs:
    """The forget logs of the tenants audited: the line of each forgotten run, and what
    is wrong with the chains."""

    lines: dict[tuple[str, str], ForgottenRun] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


def read_forget_logs(store: Store, tenants: Iterable[str]) -> ForgetLogs:
    """Read and check the forget log of each tenant: every line must follow the one
    before it (seq one more, hash over its fields and the previous hash)."""
    out = ForgetLogs()
    read = getattr(store, "forgotten_runs", None)
    if read is None:
        return out  # a store without retention forgets nothing
    for tenant in sorted(set(tenants)):
        prev, seq = forget_genesis(tenant), 0
        while True:
            page: list[ForgottenRun] = read(tenant, after=seq, limit=PAGE)
            for line in page:
                seq += 1
                if line.seq != seq or line.hash != forget_hash(prev, line):
                    out.findings.append(Finding(
                        tenant, line.run_id, None,
                        f"line {line.seq} of the forget log does not follow the line before "
                        "it: the log was edited, or lines were removed"))
                    seq = line.seq
                out.lines[(tenant, line.run_id)] = line
                prev = line.hash
            if len(page) < PAGE:
                break
    return out


def check_forgotten(line: ForgottenRun, heads: Sequence[AnchoredHead]) -> list[Finding]:
    """Whether the anchored heads of a forgotten run agree with its forget log line."""
    for h in sorted(heads, key=lambda h: (h.seq, h.record)):
        if h.seq > line.last_seq or (h.seq == line.last_seq and h.head != line.head):
            return [Finding(
                line.tenant_id, line.run_id, h.seq,
                f"the run was forgotten at seq {line.last_seq} (forget log line "
                f"{line.seq}), but record {h.record} of {h.at} anchored another head at seq "
                f"{h.seq}")]
    return []
