"""The refund desk, end to end: ``python examples/openai_agents_agent/run.py``.

Three customers write to an OpenAI Agents SDK agent run by underway. Worker 1 answers one
and parks two refunds for a manager's signed approval. The manager approves one and
rejects the other. Worker 2 is killed with SIGKILL while the payments service holds the
approved refund it has just taken; worker 3 takes the run over, asks the payments service
what happened, and finishes. Runs on SQLite in a new temporary directory, or on the
database given with ``--db``; writes ``report.json`` to ``--data``; exits 1 if a check
failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import underway as uw
from openai_agents_agent.agent import durable_desk, model_client
from openai_agents_agent.model_server import ModelServer
from openai_agents_agent.payments import Payments
from underway import events as ev
from underway.guard.approvals import (
    ApproverRecord,
    generate_keypair,
    load_private_key,
    sign_decision,
    write_private_key,
)
from underway.journal import Journal

WORKER = Path(__file__).with_name("worker.py")
QUESTIONS = {
    "anita": "Where is order 1001?",
    "bharat": "Please refund order 1002.",
    "chitra": "Please refund order 1003.",
}


def say(text: str = "") -> None:
    """Print at once."""
    print(text, flush=True)


def worker(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start a worker process, its output in ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=out,
                                stderr=subprocess.STDOUT)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", help="database URL (default: SQLite in --data)")
    p.add_argument("--data", type=Path, help="directory for files (default: a new one)")
    a = p.parse_args()
    data: Path = a.data or Path(tempfile.mkdtemp(prefix="refund-desk-"))
    data.mkdir(parents=True, exist_ok=True)
    db = a.db or f"sqlite:///{data / 'underway.db'}"
    victim: dict[str, int] = {}

    def kill_worker_2(refund: dict[str, Any]) -> None:
        # The payments service has taken the refund; the worker has not heard back.
        pid = victim.pop("pid", None)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    with ModelServer() as model, Payments(data / "payments.json", kill_worker_2) as pay:
        desk = durable_desk(model_client(model.url), pay.url)
        engine = uw.Engine(uw.connect(db), flows=[desk.flow])
        pem, public = generate_keypair()
        write_private_key(data / "manager.pem", pem)
        engine.store.put_approver(ApproverRecord(
            tenant_id="default", approver_id="manager", public_key=public, roles=("manager",),
            created_at=engine.clock.now()))
        runs = {who: engine.start(desk.flow, {"input": q}, idempotency_key=f"chat-{who}")[0]
                for who, q in QUESTIONS.items()}
        common = ["--db", db, "--model", model.url, "--payments", pay.url]
        say(f"[1] three customers write in; database {db}")

        w1 = worker([*common, *runs.values()], data / "worker-1.log")
        say(f"[2] worker 1 exited {w1.wait()}: {engine.state(runs['anita']).result!r}")
        key = load_private_key(data / "manager.pem")
        for who, decision in (("bharat", "approve"), ("chitra", "reject")):
            s = engine.state(runs[who])
            req = s.pending_approval
            assert req is not None, f"{who}'s run waits for no approval ({s.status})"
            engine.submit_decision(sign_decision(
                key, request_id=req.request_id, run_id=s.run_id, tenant_id="default",
                tool=req.tool, args_hash=req.args_hash, decision=decision,
                expires_at=req.expires_at, approver_id="manager").model_dump(mode="json"))
            say(f"[3] the manager signs: {decision} {req.tool}({req.args})")

        w2 = worker([*common, runs["bharat"]], data / "worker-2.log")
        victim["pid"] = w2.pid
        say(f"[4] worker 2 killed (SIGKILL, exit {w2.wait()}) with the refund in flight")
        w3 = worker([*common, *runs.values()], data / "worker-3.log")
        say(f"[5] worker 3 took over and exited {w3.wait()}")
        asked = dict(model.asked)
        book = pay.book()

    journal = Journal(engine.store)
    report: dict[str, Any] = {"runs": {}, "refunds": book["refunds"],
                              "refund_requests": book["requests"]}
    problems: list[str] = []
    for who, run_id in runs.items():
        s = engine.state(run_id)
        history = [r.event for r in journal.history("default", run_id)]
        answered = sum(isinstance(e, ev.ModelResponded) for e in history)
        requests = {t: n for (q, t), n in asked.items() if q == QUESTIONS[who]}
        report["runs"][who] = {"status": s.status, "result": s.result,
                               "model_responses": answered, "model_requests": requests,
                               "verified": journal.verify("default", run_id).ok}
        say(f"    {who}: {s.status}: {s.result}")
        if s.status != "completed":
            problems.append(f"{who}'s run is {s.status}")
        if sum(requests.values()) != answered:
            problems.append(f"{who}'s model was asked {requests} for {answered} answers")
    refunded = Counter(r["order_id"] for r in book["refunds"].values())
    say(f"[6] refunds: {dict(refunded)}; refund requests: {len(book['requests'])}")
    if refunded != Counter({"1002": 1}):
        problems.append(f"refunds {dict(refunded)}, not one for order 1002")
    (data / "report.json").write_text(json.dumps(report, indent=1))
    engine.store.close()
    for problem in problems:
        say(f"FAILED: {problem}")
    if not problems:
        say("OK: three runs completed, one refund paid once, no model request repeated")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
