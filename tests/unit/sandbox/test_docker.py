"""The Docker backend's container, as it would be started: the exact ``docker run`` the
backend builds, checked without an engine. ``tests/integration/sandbox/test_docker_engine.py``
and the escape tests (``tests/adversarial/sandbox/test_escapes.py``) run commands through a
real engine."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from underway.sandbox import Limits, SandboxProfile, docker
from underway.sandbox._workspace import CallDirs


@pytest.fixture(autouse=True)
def docker_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wherever the client is installed (or not), the plan names it the same way."""
    monkeypatch.setattr(docker, "binary", lambda: "/usr/bin/docker")


def test_the_container_is_locked_down_as_the_profile_says(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(tmp_path, 0o755)
    profile = SandboxProfile(
        backend="docker", ro_paths=(str(data),),
        limits=Limits(memory_mb=256, max_processes=16, cpus=0.5, timeout_s=30),
    )
    with CallDirs(None, None) as dirs:
        launch = docker.plan(profile, ["echo", "hi"], dirs, {"TOKEN": "s3cret"})
    argv = launch.argv
    run = argv[argv.index("run"):]
    pairs = set(itertools.pairwise(run))
    assert {("--network", "none"), ("--cap-drop", "ALL"), ("--security-opt", "no-new-privileges"),
            ("--user", "65534:65534"), ("--memory", "256m"), ("--memory-swap", "256m"),
            ("--pids-limit", "16"), ("--cpus", "0.5"), ("--workdir", "/workspace"),
            ("--ulimit", "core=0")} <= pairs
    assert "--read-only" in run and "--rm" in run
    assert ("--mount", f"type=bind,source={dirs.workspace},target=/workspace") in pairs
    assert ("--mount", f"type=bind,source={data},target={data},readonly") in pairs
    assert run[-7:] == [profile.image, "timeout", "-s", "KILL", "35", "echo", "hi"]
    assert "s3cret" not in " ".join(argv), "values travel in the environment, not the argv"
    assert ("--env", "TOKEN") in pairs and launch.env["TOKEN"] == "s3cret"
    assert launch.on_kill is not None, "a timeout kills the container by name"


def test_the_network_is_shared_only_when_allowed() -> None:
    with CallDirs(None, None) as dirs:
        launch = docker.plan(SandboxProfile(backend="docker", network=True), ["true"], dirs, None)
    assert launch.argv[launch.argv.index("--network") + 1] == "bridge"
