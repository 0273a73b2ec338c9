"""Counterfactual replay of the examples' recorded journals (tests/fixtures/journals):
against the code they ran, nothing changes; against a changed policy, a changed model script
and changed code, the replay says what would have been decided otherwise — and nothing is
ever written to the original runs."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from underway import Client
from underway import events as ev
from underway.guard.policy import Policy, load_policy
from underway.ops.replay import ReplayResult, model_from_spec, replay_run, replay_runs
from underway.store import Store, connect

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))
from examples.invoice_followup import flow as followup
from recorded_journals import EXAMPLES, ROOT, app, load

ENVIRONMENT = {"invoice_followup": None, "collections": "prod", "support": "prod"}
"""The policy environment each example's workers ran in."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'journals.db'}"
    else:
        yield request.getfixturevalue("pg_url")


def loaded(url: str, example: str) -> tuple[Store, list[dict[str, Any]]]:
    store = connect(url)
    return store, load(store, example)


def replay(store: Store, example: str, run_id: str, tmp: Path, **options: Any) -> ReplayResult:
    flows, tools = app(example, tmp / "app")
    options.setdefault("environment", ENVIRONMENT[example])
    return asyncio.run(replay_run(store, run_id, flows=flows, tools=tools, **options))


def heads(store: Store) -> list[tuple[str, str, int, str]]:
    return store.journal_heads()


def run_about(store: Store, invoice: str) -> str:
    """The collections run of ``invoice``."""
    client = Client(store)
    for row in client.list_runs(flow="collections").runs:
        if client.history(row.run_id)[0].event.input["context"]["invoice_id"] == invoice:
            return row.run_id
    raise AssertionError(f"no run about {invoice}")


def policy_file(tmp: Path, source: Path, *replacements: tuple[str, str]) -> Policy:
    text = source.read_text()
    for old, new in replacements:
        assert old in text
        text = text.replace(old, new)
    path = tmp / "changed-policy.toml"
    path.write_text(text)
    return load_policy(path)


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_recorded_run_replays_as_it_ran(db: str, example: str, tmp_path: Path) -> None:
    store, runs = loaded(db, example)
    try:
        before = heads(store)
        for run in runs:
            result = replay(store, example, run["run_id"], tmp_path)
            assert result.changes == [], (run["run_id"], result.changes)
            assert result.stopped is None and result.divergences == []
            assert result.replay.status == result.original.status == "completed"
            assert len(result.replay.calls) == len(result.original.calls) > 0
            assert [c.outcome for c in result.replay.calls] == \
                [c.outcome for c in result.original.calls]
        assert heads(store) == before  # nothing was written to the original runs
    finally:
        store.close()


def test_a_lower_approval_limit_would_have_held_the_refund(tmp_path: Path) -> None:
    store, _ = loaded(f"sqlite:///{tmp_path / 'j.db'}", "collections")
    strict = policy_file(tmp_path, ROOT / "examples/collections_agent/policy.toml",
                         ('value = "5000"', 'value = "400"'))
    refunded = run_about(store, "INV-2041")
    result = replay(store, "collections", refunded, tmp_path, policy=strict)
    assert [str(c) for c in result.changes] == ["would have needed approval (issue_refund)"]
    refund = next(c for c in result.replay.calls if c.tool == "issue_refund")
    assert (refund.policy, refund.rule, refund.approval, refund.outcome) == (
        "require_approval", "money-out-above-5000-inr-needs-finance", "granted", "succeeded")
    assert result.assumed == ["issue_refund: approval assumed granted (the original never "
                              "asked for one for these arguments)"]

    flows, tools = app("collections", tmp_path / "app")
    batch = asyncio.run(replay_runs(store, flow="collections", since=0, flows=flows,
                                    tools=tools, policy=strict, environment="prod"))
    changed = {e.run_id: [c.kind for c in e.result.changes] for e in batch
               if e.result is not None and e.result.changed}
    assert changed == {refunded: ["approval_needed"]}
    assert len(batch) == 3


def test_without_the_untrusted_reply_rule_the_injected_reply_would_have_gone_out(
    tmp_path: Path,
) -> None:
    store, _ = loaded(f"sqlite:///{tmp_path / 'j.db'}", "support")
    lax = policy_file(tmp_path, ROOT / "examples/support/policy.toml",
                      ('tools = ["send_reply"]\nlabels_any = ["untrusted"]',
                       'tools = ["no_such_tool"]\nlabels_any = ["untrusted"]'))
    flows, tools = app("support", tmp_path / "app")
    batch = asyncio.run(replay_runs(store, flow="support_agent", since=0, flows=flows,
                                    tools=tools, policy=lax, environment="prod"))
    results = [e.result for e in batch if e.result is not None]
    assert len(results) == 5
    # Every reply held only by the rule (not the high-priority one) would have gone out.
    dropped = [r for r in results if "approval_dropped" in [c.kind for c in r.changes]]
    assert len(dropped) == 3
    # The ticket whose injected reply the lead rejected: without the rule it is sent.
    injected = next(r for r in results
                    if any(c.approval == "rejected" for c in r.original.calls))
    kinds = [c.kind for c in injected.changes]
    assert "approval_dropped" in kinds and "diverged" in kinds
    assert injected.stopped is not None and injected.stopped.kind == "not_run"
    assert "never ran there (refused: approval_rejected)" in injected.stopped.what
    sent = next(c for c in injected.replay.calls if c.tool == "send_reply")
    assert (sent.policy, sent.approval) == ("allow", None)


def _changed_script(store: Store, run_id: str, tmp: Path) -> Path:
    """The run's recorded model responses, with the refund's amount doubled."""
    responses = [r.event.response for r in Client(store).history(run_id)
                 if isinstance(r.event, ev.ModelResponded)]
    for response in responses:
        for call in response.get("tool_calls") or []:
            if call["name"] == "issue_refund":
                call["arguments"]["amount"] = "900.00"
    path = tmp / "changed-script.json"
    path.write_text(json.dumps(responses))
    return path


def test_a_changed_model_script_pays_another_amount(tmp_path: Path) -> None:
    store, _ = loaded(f"sqlite:///{tmp_path / 'j.db'}", "collections")
    refunded = run_about(store, "INV-2041")
    script = _changed_script(store, refunded, tmp_path)

    stopped = replay(store, "collections", refunded, tmp_path,
                     model=model_from_spec(f"script:{script}"))
    assert stopped.stopped is not None and stopped.stopped.kind == "call"
    assert stopped.stopped.what == "issue_refund #1: the original made no such call"
    assert [c.kind for c in stopped.changes] == ["calls", "diverged"]

    stubbed = replay(store, "collections", refunded, tmp_path, on_divergence="stub",
                     model=model_from_spec(f"script:{script}"))
    assert stubbed.stopped is None and [d.kind for d in stubbed.divergences] == ["call"]
    assert stubbed.replay.status == "completed"
    assert [str(c) for c in stubbed.changes if c.kind == "money"] == [
        "would have paid a different amount (INR 450.00 → INR 900.00)"]
    assert {c.kind for c in stubbed.changes} == {"calls", "money", "cost"}


def test_changed_code_that_words_reminders_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, (run,) = loaded(f"sqlite:///{tmp_path / 'j.db'}", "invoice_followup")
    original = followup._reminder

    def curt(inv: Any, as_of: Any) -> Any:
        return original(inv, as_of).model_copy(update={"subject": f"Unpaid: {inv.id}"})

    monkeypatch.setattr(followup, "_reminder", curt)
    stopped = replay(store, "invoice_followup", run["run_id"], tmp_path)
    stubbed = replay(store, "invoice_followup", run["run_id"], tmp_path,
                     on_divergence="stub")
    assert stopped.stopped is not None and stopped.stopped.step == "send_reminder"
    assert [c.kind for c in stopped.changes] == ["calls", "diverged"]
    sends = [c for c in stubbed.replay.calls if c.tool == "send_reminder"]
    assert len(sends) == 3 and all(c.args["subject"].startswith("Unpaid") for c in sends)
    assert stubbed.replay.status == "completed" and len(stubbed.divergences) == 3
    assert [c.kind for c in stubbed.changes] == ["calls"]
