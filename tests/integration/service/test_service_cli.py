"""``underway serve``, ``underway apikeys`` and ``underway webhooks`` as a user runs them:
real processes on a real SQLite file; the server is ready once /healthz answers (polled
with a deadline), and other commands never import FastAPI."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

UNDERWAY = Path(sys.executable).with_name("underway")


def run(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(UNDERWAY), "--db", db, *args], capture_output=True, text=True,
                          timeout=120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_keys_webhooks_and_serve_from_the_command_line(sqlite_url: str) -> None:
    assert run("db", "migrate", db=sqlite_url).returncode == 0
    made = run("apikeys", "new", "--tenant", "acme", "--role", "operator", "--name", "ops",
               db=sqlite_url)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("uwk_") and "shown this once" in made.stderr
    assert run("apikeys", "new", "--tenant", "acme", "--role", "root",
               db=sqlite_url).returncode == 2
    listed = json.loads(run("apikeys", "ls", "--json", db=sqlite_url).stdout)
    assert [(k["tenant_id"], k["role"], k["name"]) for k in listed] == [("acme", "operator",
                                                                         "ops")]
    assert "token" not in json.dumps(listed) and token not in json.dumps(listed)
    secret = run("webhooks", "set", "billing", "--tenant", "acme", db=sqlite_url)
    assert secret.stdout.strip().startswith("whsec_")
    assert "billing" in run("webhooks", "ls", "--tenant", "acme", db=sqlite_url).stdout

    port = free_port()
    began = time.monotonic()
    server = subprocess.Popen([str(UNDERWAY), "--db", sqlite_url, "serve", "--port", str(port),
                               "--log-level", "warning", "--max-body-bytes", "4096"],
                              stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None, server.communicate()
            assert time.monotonic() < deadline, "underway serve did not answer /healthz"
            # Between polls, wait on the process: it ends early if serve fails.
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(0.05)
        started_in = time.monotonic() - began
        with httpx.Client(base_url=f"http://127.0.0.1:{port}",
                          headers={"Authorization": f"Bearer {token}"}) as http:
            assert http.get("/readyz").json()["status"] == "ready"
            r = http.post("/v1/runs", json={"flow": "anything", "input": {"n": 1}},
                          headers={"Idempotency-Key": "k"})
            assert r.status_code == 201
            run_id = r.json()["run_id"]
            big = http.post("/v1/runs", json={"flow": "anything", "input": "x" * 5000})
            assert big.status_code == 413 and "4096" in big.json()["detail"]
            assert http.get(f"/v1/runs/{run_id}").json()["flow"] == "anything"
            log = run("apikeys", "access-log", "--tenant", "acme", "--json", db=sqlite_url)
            assert [e["run_id"] for e in json.loads(log.stdout)] == [run_id]
            key_id = listed[0]["key_id"]
            assert run("apikeys", "revoke", key_id, "--tenant", "acme",
                       db=sqlite_url).returncode == 0
            assert http.get(f"/v1/runs/{run_id}").status_code == 401
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    # uvicorn stops gracefully, then ends the process by the signal it was sent.
    assert server.returncode in (0, -signal.SIGTERM), err
    print(f"underway serve answered /healthz {started_in:.2f}s after it was started")


def test_other_commands_do_not_import_the_service() -> None:
    code = ("import sys, underway, underway.cli; "
            "print(any(m.startswith(('fastapi', 'uvicorn', 'underway.service')) "
            "for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ}, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
