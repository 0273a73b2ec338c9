"""A client generated from the server's own ``/openapi.json`` by ``openapi-python-client``
drives a run: start it, read it, list it, send it a signal, see it finish. The generator
must not warn (every response it reads has a model, every problem response the Problem
schema), and it runs offline (the document is a file; its network calls would fail)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fakes.service_world import World

PACKAGE = "underway_api"
"""The generated package's name."""

OFFLINE = """
import socket, sys

def offline(*args, **kwargs):
    raise OSError("the generator tried to reach the network")

socket.socket.connect = socket.socket.connect_ex = offline
socket.create_connection = socket.getaddrinfo = offline
from openapi_python_client.cli import app
sys.argv[0] = "openapi-python-client"
app()
"""
"""Runs the generator's command line with every way out to the network closed."""


def generate(document: bytes, where: Path) -> None:
    """Generate the client package from ``document`` into ``where``; fail on a warning."""
    spec = where / "openapi.json"
    spec.write_bytes(document)
    config = where / "generator.yaml"
    # No post hooks: the generator would otherwise run ruff over the package.
    config.write_text(f"package_name_override: {PACKAGE}\npost_hooks: []\n")
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE, "generate", "--path", str(spec),
         "--output-path", str(where / PACKAGE), "--config", str(config), "--meta", "none",
         "--fail-on-warning"],
        capture_output=True, text=True, cwd=where, timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "warning" not in output.lower(), output


@pytest.fixture
def api(world: World, tmp_path: Path) -> Iterator[ModuleType]:
    """The package generated from the running server's document, importable."""
    response = world.http.get("/openapi.json")
    assert response.status_code == 200
    generate(response.content, tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture
def clients(world: World, api: ModuleType) -> Iterator[dict[str, Any]]:
    """Generated clients of the server: ``operator`` and ``viewer`` of tenant acme, and
    ``anyone`` without a key."""
    made = {role: api.AuthenticatedClient(base_url=world.server.url,
                                          token=world.token["acme"][role],
                                          raise_on_unexpected_status=True)
            for role in ("operator", "viewer")}
    made["anyone"] = api.Client(base_url=world.server.url, raise_on_unexpected_status=True)
    with made["operator"], made["viewer"], made["anyone"]:
        yield made


def operation(tag: str, name: str) -> Any:
    """The generated module of the operation ``name`` (its functions ``sync`` and so on)."""
    return importlib.import_module(f"{PACKAGE}.api.{tag}.{name}")


def test_a_generated_client_starts_reads_signals_and_finishes_a_run(
        world: World, clients: dict[str, Any]) -> None:
    models = importlib.import_module(f"{PACKAGE}.models")
    operator = clients["operator"]
    start_run, get_run = operation("runs", "start_run"), operation("runs", "get_run")
    body = models.StartRun(flow="reminders", input_={"invoice": "INV-7", "amount": 5})
    started = start_run.sync(client=operator, body=body, idempotency_key="INV-7")
    again = start_run.sync(client=operator, body=body, idempotency_key="INV-7")
    assert isinstance(started, models.Started) and started.created
    assert (again.run_id, again.created) == (started.run_id, False)

    world.drive()
    run = get_run.sync(started.run_id, client=operator)
    assert isinstance(run, models.RunDetail)
    assert (run.status, run.step, run.flow) == (models.RunStatus.WAITING, "settle", "reminders")
    assert run.waiting_on.kind == models.WaitingOnKind.SIGNAL and run.waiting_on.signal == "paid"
    page = operation("runs", "list_runs").sync(client=operator, status=models.RunStatus.WAITING)
    assert [r.run_id for r in page.runs] == [started.run_id]

    signal = models.SendSignal(name="paid", payload={"amount": 5}, signal_id="pay-1")
    accepted = operation("runs", "send_signal").sync(started.run_id, client=operator,
                                                     body=signal)
    assert isinstance(accepted, models.Accepted) and accepted.delivered
    world.drive()
    run = get_run.sync(started.run_id, client=operator)
    assert run.status == models.RunStatus.COMPLETED and run.waiting_on is None
    events = operation("runs", "list_events").sync(started.run_id, client=operator)
    assert events[-1].type_ == "RunCompleted"
    assert events[-1].data.to_dict()["result"] == {"paid": {"amount": 5}}
    figures = operation("reads", "get_activity").sync(client=operator, days=1)
    assert isinstance(figures, models.ActivityFigures)
    assert figures.runs["completed"] == [1] and figures.dead_now.runs == []


def test_a_generated_client_reads_problems_as_problems(clients: dict[str, Any]) -> None:
    models = importlib.import_module(f"{PACKAGE}.models")
    viewer = clients["viewer"]
    missing = operation("runs", "get_run").sync("no-such-run", client=viewer)
    assert isinstance(missing, models.Problem)
    assert (missing.status, missing.title) == (404, "Not found")
    refused = operation("runs", "send_signal").sync(
        "no-such-run", client=viewer, body=models.SendSignal(name="paid"))
    assert isinstance(refused, models.Problem) and refused.status == 403
    health = operation("health", "get_readiness").sync(client=clients["anyone"])
    assert isinstance(health, models.Health) and health.status == "ready"
