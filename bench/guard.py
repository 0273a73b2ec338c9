"""What the guard costs per tool call: approval verification and a whole guarded call.

- ``approval_verify``: :func:`underway.guard.approvals.verify_decision` on a valid signed
  decision (Ed25519 signature check, key decoding, field comparisons), median µs. Its
  baseline is the same decision in the format before JCS (underway's own canonical JSON).
- ``guarded_call_overhead``: one read-only tool call in a step on the in-memory store,
  with the realistic 50-rule policy of ``policy.py`` against the same call with no policy
  (the baseline, measured in the same run). The difference is what the guard adds to each
  call: building the policy context, evaluating, journaling ``PolicyDecided``.
"""

from __future__ import annotations

import asyncio
import base64
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, median
from policy import realistic_policy
from underway.events import canonical_json
from underway.guard.approvals import (
    ApprovalCheck,
    ApproverRecord,
    generate_keypair,
    load_private_key,
    sign_decision,
    verify_decision,
    write_private_key,
)
from underway.guard.approvals.decision import LEGACY_DOMAIN
from underway.testing import memory_engine

CALLS = 400


def approval_verify_us(n: int = 400) -> tuple[float, float]:
    """Median µs to verify a decision over JCS, and one in the format before JCS."""
    pem, public = generate_keypair()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.pem"
        write_private_key(path, pem)
        key = load_private_key(path)
    check = ApprovalCheck(request_id="apr:r:0:s:0", run_id="r", tenant_id="t", tool="refund",
                          args_hash="ab" * 32, required_role="finance", expires_at=2e9)
    d = sign_decision(key, request_id=check.request_id, run_id="r", tenant_id="t",
                      tool="refund", args_hash=check.args_hash, decision="approve",
                      expires_at=2e9, approver_id="alice")
    # Signed as underway signed decisions before JCS.
    fields = d.model_dump(mode="json", exclude={"signature", "canon"})
    old_signature = key.sign(LEGACY_DOMAIN + canonical_json(fields))
    old = d.model_copy(update={"canon": None,
                               "signature": base64.b64encode(old_signature).decode()})
    approver = ApproverRecord("t", "alice", public, ("finance",), 0.0)
    times: dict[str | None, list[float]] = {"jcs": [], None: []}
    for _ in range(n):
        for decision in (d, old):
            began = time.perf_counter()
            reason = verify_decision(decision, check=check, approver=approver, now=1.9e9)
            times[decision.canon].append(time.perf_counter() - began)
            assert reason is None
    return median(times["jcs"]) * 1e6, median(times[None]) * 1e6


class Args(BaseModel):
    """Arguments of the benchmark's tool."""

    invoice: str
    amount: float


@uw.tool(read_only=True)
async def lookup(args: Args) -> dict[str, Any]:
    """A read-only lookup."""
    return {"ok": True}


class S(BaseModel):
    pass


def seconds_per_call(policy: uw.Policy | None) -> float:
    flow = uw.Flow("calls", state=S, tools=[lookup], policy=policy)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        for i in range(CALLS):
            await ctx.call(lookup, {"invoice": f"INV-{i}", "amount": 100.0 + i})
        return ctx.done()

    engine, _ = memory_engine([flow])
    began = time.perf_counter()
    asyncio.run(uw.run(engine, flow))
    return (time.perf_counter() - began) / CALLS


def bench(*, reps: int = 5) -> list[Figure]:
    """Approval verification and guarded-call overhead."""
    verify, verify_before_jcs = approval_verify_us()
    plain = median([seconds_per_call(None) for _ in range(reps)])
    guarded = median([seconds_per_call(realistic_policy()) for _ in range(reps)])
    added = (guarded - plain) * 1e6
    return [
        Figure("approval_verify", verify, "us", verify_before_jcs, verify / verify_before_jcs,
               target="value < 1000 us", ok=verify < 1000,
               note="Ed25519 verification of a decision signed over JCS and its field "
                    "checks; baseline: the same decision in the format before JCS, in µs"),
        Figure("guarded_call_overhead", added, "us", plain * 1e6, guarded / plain,
               target="added < 100 us", ok=added < 100,
               note="added per read-only call by a 50-rule policy (memory store); baseline: "
                    "the same call with no policy, in µs"),
    ]
