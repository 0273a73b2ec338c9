"""The protocol's Promela model (src/underway/engine/protocol.pml), checked with Spin.

The model holds its four properties in every state Spin reaches, within its bounds; every
run finishes on every execution; each scenario the model is there for is reached; each
mutation of it (the fence removed, the intent committed after the effect, ...) gives a
counterexample; and the fault points it names are the code's. docs/protocol.md says what
is modelled and what is not. Spin and gcc come from scripts/ensure-spin: without them
these tests fail, they never skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from underway import faults

MODEL = Path(__file__).resolve().parents[2] / "src" / "underway" / "engine" / "protocol.pml"

# Which properties a check asserts (the model's PROPS bits).
EFFECT, WRITER, LOST, PROGRESS = 1, 2, 4, 8

IN_SCOPE = {
    "step.before_run": "a step about to run, its StepStarted buffered",
    "effect.before_run": "the intent committed, the request not yet sent",
    "effect.after_run": "the tool answered, its outcome not yet committed",
    "append.before_commit": "a batch handed to the group commit",
    "append.after_commit": "a batch committed, the activation not yet told",
    "group.before_commit": "a group taken from the queue, its transaction not begun",
    "group.uncommitted": "inside the group's transaction, before it commits",
    "group.after_commit": "the group committed, its members not yet answered",
    "start.eager_after_commit": "a run created with its lease, not yet activated",
}
"""Fault points on the path the model describes: each must be named in the model."""

OUT_OF_SCOPE = {
    "signals.after_commit": "signals between runs (a child's end, a cancel cascade)",
    "child.before_create": "child runs",
    "child.after_create": "child runs",
    "reseal.after_batch": "key rotation",
    "retention.before_purge": "retention of finished runs",
    "retention.purge_uncommitted": "retention of finished runs",
    "retention.after_purge": "retention of finished runs",
    "retention.before_collect": "retention of finished runs",
    "retention.before_forget": "retention of finished runs",
    "retention.forget_uncommitted": "retention of finished runs",
    "erasure.before_purge": "erasure of a data subject",
    "erasure.before_vault": "erasure of a data subject",
    "erasure.before_log": "erasure of a data subject",
    "intake.before_commit": "intake of outside messages (deduplicated by key)",
    "intake.after_commit": "intake of outside messages (deduplicated by key)",
    "intake.after_dead_letter": "intake of outside messages (deduplicated by key)",
    "bulk.before_action": "bulk actions: a loop of the operator's signals",
    "bulk.after_action": "bulk actions: a loop of the operator's signals",
    "spans.before_send": "export of spans from the journal",
    "spans.after_send": "export of spans from the journal",
    "blob.after_chunk": "chunks of large values, written before the fenced event",
}
"""Fault points the model leaves out, and what they belong to (docs/protocol.md)."""

MAIN = {"NW": 2, "NR": 2, "MAXFAULTS": 2}
"""Two workers, two runs (group commit, both kinds of tool), any two faults."""
CHAIN = {"NW": 3, "NR": 1, "MAXFAULTS": 3}
"""Three workers, one run: takeovers of takeovers, any three faults."""
ONE_FAULT = {**MAIN, "MAXFAULTS": 1}
"""Each mutation breaks the protocol with a single fault: the search stays small."""

SCENARIOS = {
    "reached_takeover", "reached_commit_refused", "reached_group_member_fenced",
    "reached_group_rest_committed", "reached_outside_refused", "reached_reconciled_rerun",
    "reached_reconciled_happened", "reached_hook_escalated",
    "reached_person_licensed_rerun", "reached_resume",
}


@dataclass
class Verdict:
    """What one search said."""

    output: str
    trail: bool
    replay: str

    @property
    def errors(self) -> int:
        found = re.search(r"errors: (\d+)", self.output)
        assert found, self.output[-3000:]
        return int(found.group(1))

    @property
    def violated(self) -> list[str]:
        return re.findall(r"assertion violated (.*?) \(at depth", self.output)

    @property
    def reached(self) -> set[str]:
        """The scenarios a search with witnesses reached (their assertions' names)."""
        return {m.group(1) for v in self.violated if (m := re.match(r"\((reached_\w+)==0\)$", v))}


def search(
    where: Path, defines: dict[str, object], *, liveness: bool = False,
    options: tuple[str, ...] = (), optimise: bool = False,
) -> Verdict:
    """Generate the verifier of the model with ``defines``, compile it, run it in ``where``.

    A safety search (``-DSAFETY``) checks the assertions and that no state is stuck
    (invalid end states); a liveness search (``liveness``) checks the model's LTL
    formula under weak fairness (``-a -f``). ``optimise``: compile with -O2, which pays
    only for a large search (the compiler takes seconds; most searches take less).
    """
    for tool in ("spin", "gcc"):
        assert shutil.which(tool), f"{tool} is not installed: run scripts/ensure-spin"
    shutil.copy(MODEL, where / MODEL.name)
    flags = [f"-D{k}" if v is True else f"-D{k}={v}" for k, v in defines.items()]
    if liveness:
        flags.append("-DLIVENESS")
    run(["spin", *flags, "-a", MODEL.name], where)
    # Exhaustive: no bitstate, no hash compaction. The largest search stores about 2.3
    # million states of 200 bytes (about 0.6 GB); MEMLIM stops it short of 2 GB.
    safety = [] if liveness else ["-DSAFETY"]
    run(["gcc", "-w", "-O2" if optimise else "-O0", "-DMEMLIM=2048", *safety, "-o", "pan",
         "pan.c"], where)
    out = run(["./pan", "-m20000", *options, *(["-a", "-f"] if liveness else [])], where)
    trail = (where / f"{MODEL.name}.trail").exists()
    replay = run(["spin", *flags, "-t", MODEL.name], where) if trail else ""
    return Verdict(out, trail, replay)


def run(cmd: list[str], where: Path) -> str:
    done = subprocess.run(cmd, cwd=where, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0 or cmd[0] == "./pan", (cmd, done.stdout, done.stderr)
    return done.stdout + done.stderr


@pytest.mark.parametrize(("bounds", "scenarios"), [
    (MAIN, SCENARIOS),
    (CHAIN, SCENARIOS - {"reached_group_member_fenced", "reached_group_rest_committed"}),
], ids=["2-workers-2-runs", "3-workers-1-run"])
def test_the_protocol_holds_its_properties(
    tmp_path: Path, bounds: dict[str, int], scenarios: set[str]
) -> None:
    """Every property holds in every state the search reaches, and the search reaches
    every scenario the model is there for. Each scenario fails an assertion of its own the
    first time it happens (-DWITNESSES); the search goes on past errors (-c0). So its only
    errors must be those, and they must name every scenario: a property that held only
    because its scenario never happened would show here."""
    verdict = search(tmp_path, {**bounds, "WITNESSES": True}, options=("-c0",),
                     optimise=bounds is MAIN)
    assert "Search not completed" not in verdict.output
    assert verdict.reached == scenarios, verdict.output[-3000:]
    assert verdict.errors == len(verdict.violated) == len(scenarios), verdict.output[-3000:]
    stored = re.search(r"(\d+) states, stored", verdict.output)
    assert stored, verdict.output
    # The search covered the model, not a corner of it (a bound that cut it short shows).
    assert int(stored.group(1)) > (1_000_000 if bounds is MAIN else 100_000), verdict.output


@pytest.mark.parametrize("bounds", [
    ONE_FAULT, {**CHAIN, "MAXFAULTS": 2},
], ids=["2-workers-2-runs", "3-workers-1-run"])
def test_every_run_finishes(tmp_path: Path, bounds: dict[str, int]) -> None:
    verdict = search(tmp_path, bounds, liveness=True)
    assert re.search(r"acceptance\s+cycles\s+\+ \(fairness enabled\)", verdict.output)
    assert verdict.errors == 0, verdict.output[-3000:]
    assert "Search not completed" not in verdict.output


STALE = r"commits \d events to run \d after seq \d+ \(token (\d+), the run's (?!\1\))\d+\)"
"""A worker commits with a lease token that is no longer the run's."""

MUTANTS = [
    # (mutation, bounds, the property asserted, what its assertion reads, what the
    # counterexample's replay tells)
    ("NO_TOKEN_FENCE", ONE_FAULT, WRITER, "holder[", STALE),
    ("NO_FENCE", ONE_FAULT, LOST, "J[", STALE),
    ("INTENT_AFTER", ONE_FAULT, EFFECT, "execd[", r"takes effect \(2 times now\)"),
    ("NO_OUTSIDE_FENCE", ONE_FAULT, EFFECT, "execd[",
     r"reconcile hook .*: not happened.*takes effect \(2 times now\)"),
    ("GROUP_ONE_FENCE", ONE_FAULT, WRITER, "holder[", STALE),
    ("DEAD_HOLD", ONE_FAULT, PROGRESS, "rstatus[", r"w\d dies"),
]


@pytest.mark.parametrize(("mutation", "bounds", "prop", "reads", "story"), MUTANTS,
                         ids=[m[0] for m in MUTANTS])
def test_a_broken_protocol_gives_a_counterexample(
    tmp_path: Path, mutation: str, bounds: dict[str, int], prop: int, reads: str, story: str
) -> None:
    verdict = search(tmp_path, {**bounds, mutation: True, "PROPS": prop})
    assert verdict.errors >= 1, verdict.output[-3000:]
    assert verdict.trail
    assert len(verdict.violated) == 1 and reads in verdict.violated[0], verdict.output
    # The trail replays to the same violation, telling how it came about.
    assert "assertion violated" in verdict.replay, verdict.replay[-3000:]
    assert re.search(story, verdict.replay, re.DOTALL), verdict.replay[-3000:]


def test_the_model_names_the_code_fault_points() -> None:
    named = set(re.findall(r"fault point: ([a-z_]+\.[a-z_]+)", MODEL.read_text()))
    assert named <= set(faults.POINTS), named - set(faults.POINTS)
    assert set(IN_SCOPE) <= named, set(IN_SCOPE) - named
    # Every point of the code is either in the model or left out knowingly.
    assert set(IN_SCOPE) | set(OUT_OF_SCOPE) == set(faults.POINTS)
    assert not set(IN_SCOPE) & set(OUT_OF_SCOPE)
