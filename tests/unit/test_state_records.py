"""The records inside a run's state are frozen models, and checkpoints hold them exactly as
the dicts they were before: an old checkpoint loads, a new one encodes the same bytes."""

from __future__ import annotations

from typing import Any, get_args

import pytest
from pydantic import ValidationError

from underway import events as ev
from underway.events import canonical_json
from underway.journal.state import ApprovalRecord, Escalation, Recorded, RunState, apply

OLD_ESCALATION = {"reason": "outcome unknown", "key": "r:0:go:0", "tool": "pay", "index": 0,
                  "was": "ready", "cause": "unknown_outcome", "request_id": "escalation-7"}
OLD_QUESTION = {"reason": "question: which?", "key": "r:0:go:1", "tool": "ask", "index": 1,
                "was": "ready", "cause": "question", "request_id": "apr:r:0:go:1",
                "question": "which?", "context": {"n": 2}, "required_role": "support",
                "expires_at": 1.7e9}
OLD_PENDING = {"request_id": "apr:r:0:go:0", "key": "r:0:go:0", "tool": "pay", "index": 0,
               "args": {"amount": 5}, "args_hash": "ab", "evidence": None, "risks": ["x"],
               "required_role": "finance", "expires_at": 1.7e9, "rule_id": "big",
               "policy_version": "1"}
OLD_APPROVAL = {"decision": {"decision": "approve"}, "required_role": "finance",
                "expires_at": 1.7e9, "request_id": "apr:r:0:go:0"}


def old_checkpoint(**records: Any) -> dict[str, Any]:
    data = RunState("t", "r").to_json()
    data.update(records)
    return data


@pytest.mark.parametrize("escalation", [OLD_ESCALATION, OLD_QUESTION])
def test_an_old_checkpoint_loads_and_encodes_the_same(escalation: dict[str, Any]) -> None:
    data = old_checkpoint(escalation=escalation, status="escalated",
                          approvals={"r:0:go:0": OLD_APPROVAL})
    s = RunState.from_json(data)
    assert isinstance(s.escalation, Escalation)
    assert s.escalation.request_id == escalation["request_id"]
    assert s.escalation.is_question == (escalation["cause"] == "question")
    assert isinstance(s.approvals["r:0:go:0"], ApprovalRecord)
    assert s.to_json() == data


def test_a_pending_approval_is_the_request_itself() -> None:
    data = old_checkpoint(pending_approval=OLD_PENDING, status="waiting")
    s = RunState.from_json(data)
    assert isinstance(s.pending_approval, ev.ApprovalRequested)
    assert s.pending_approval.tool == "pay" and s.pending_approval.risks == ["x"]
    assert s.to_json() == data
    assert RunState.from_json(s.to_json()) == s


def test_records_are_frozen() -> None:
    esc = Escalation.model_validate(OLD_ESCALATION)
    with pytest.raises(ValidationError):
        esc.reason = "changed"  # type: ignore[misc]


def test_the_fold_builds_the_records() -> None:
    s = RunState("t", "r")
    apply(s, Recorded(1, 1.0, ev.Escalated(reason="r", key="k", tool="t", index=0,
                                           cause="unknown_outcome")))
    assert s.escalation == Escalation(reason="r", key="k", tool="t", index=0, was="ready",
                                      cause="unknown_outcome", request_id="escalation-1")
    assert s.to_json()["escalation"] == {
        "reason": "r", "key": "k", "tool": "t", "index": 0, "was": "ready",
        "cause": "unknown_outcome", "request_id": "escalation-1"}


def test_every_event_type_is_in_the_union_the_fold_matches_on() -> None:
    # With every type in RunEvent, mypy's assert_never in the fold proves each is handled.
    assert set(get_args(ev.RunEvent)) == set(ev.EVENT_TYPES.values())


def test_a_shared_snapshot_encodes_as_the_copied_one() -> None:
    call = {"index": 0, "key": "r:0:go:0", "tool": "pay", "args_hash": "ab",
            "status": "succeeded", "result": {"paid": [1, 2.5, True]}, "error_type": None,
            "message": None, "retryable": False, "attempts": 2, "maybe_happened": False,
            "approval_requests": 1}
    s = RunState.from_json(old_checkpoint(
        escalation=OLD_QUESTION, status="escalated", pending_approval=OLD_PENDING,
        approvals={"r:0:go:0": OLD_APPROVAL}, calls=[call], state={"history": [{"n": 1}]},
        values=["v", 0.5], money={"INR": 5.0}, versions={"c1": True}, forked_from="r0",
        model_usage={"default": {"calls": 1, "tokens_in": 3, "tokens_out": 4,
                                 "cost_usd": 0.5}}))
    shared = s.to_json(shared=True)
    assert shared == s.to_json()
    assert canonical_json(shared) == canonical_json(s.to_json())
    # It holds the state's own values: nothing was copied to be encoded.
    assert shared["state"] is s.state and shared["values"] is s.values
