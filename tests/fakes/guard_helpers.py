"""Shared pieces of the guard, agent and forged-approval tests: an approvals-enabled engine
and signing helpers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from underway import events as ev
from underway.engine import Engine
from underway.guard.approvals import (
    ApproverRecord,
    generate_keypair,
    load_private_key,
    sign_decision,
    write_private_key,
)
from underway.journal.state import RunState
from underway.runner import Runner


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def history(engine: Engine, run_id: str, tenant: str = "default") -> list[ev.Event]:
    return [r.event for r in engine.journal.history(tenant, run_id)]


def of_type(engine: Engine, run_id: str, cls: type[ev.Event], tenant: str = "default") -> list[Any]:
    return [e for e in history(engine, run_id, tenant) if isinstance(e, cls)]


def drive(engine: Engine, run_id: str, tenant: str = "default") -> RunState:
    """Advance everything due, then return the run's state."""
    run(Runner(engine).run_until_idle())
    return engine.state(run_id, tenant_id=tenant)


class Approver:
    """An approver with a key pair on disk, registered in a tenant."""

    def __init__(self, engine: Engine, tmp: Path, approver_id: str, roles: tuple[str, ...],
                 tenant: str = "default", register: bool = True) -> None:
        pem, public = generate_keypair()
        path = tmp / f"{approver_id}-{tenant}.pem"
        write_private_key(path, pem)
        self.key = load_private_key(path)
        self.id, self.public, self.tenant = approver_id, public, tenant
        if register:
            engine.store.put_approver(ApproverRecord(
                tenant_id=tenant, approver_id=approver_id, public_key=public, roles=roles,
                created_at=engine.clock.now(),
            ))

    def decide(self, state: RunState, decision: str = "approve", **override: Any) -> dict[str, Any]:
        """A signed decision on the run's pending request (fields overridable to forge)."""
        req = state.pending_approval
        fields: dict[str, Any] = {
            "request_id": req and req.request_id, "run_id": state.run_id,
            "tenant_id": state.tenant_id, "tool": req and req.tool,
            "args_hash": req and req.args_hash, "decision": decision,
            "expires_at": req and req.expires_at, "approver_id": self.id,
        }
        fields.update(override)
        return sign_decision(self.key, **fields).model_dump(mode="json")
