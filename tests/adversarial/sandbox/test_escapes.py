"""Escapes from the sandbox, tried for real and judged from the host.

Every attempt of :mod:`underway.sandbox.escapes` runs on every backend: bubblewrap must
block each one; Docker must block each one where an engine runs (``make test`` starts one
when it can, with a local image: see ``tests/fakes/docker_image.py``), and where none does
must refuse to run them at all. A few attempts also run where they are expected to
succeed — without isolation, or with the door opened in the profile — which shows that the
host-side checks do see an escape when one happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from fakes.docker_image import engine_reason, require_image
from underway.sandbox import SandboxProfile, SandboxUnavailable, run_command, why_unavailable
from underway.sandbox.escapes import ESCAPES, Escape, base_profile
from underway.sandbox.escapes._processes import _bomb_ids

BACKENDS = ["bwrap", "docker"]


@pytest.mark.parametrize("escape", ESCAPES, ids=lambda e: e.name)
@pytest.mark.parametrize("backend", BACKENDS)
def test_escape_is_blocked(backend: str, escape: Escape) -> None:
    profile = base_profile(backend)
    reason = why_unavailable(backend, profile) if backend == "bwrap" else engine_reason()
    if reason is None and backend == "docker":
        profile = base_profile(backend, require_image())
    if reason is not None:
        assert backend != "bwrap", f"bubblewrap must be usable for these tests: {reason}"
        try:
            verdict = asyncio.run(escape.attempt(profile))
        except SandboxUnavailable as exc:
            assert backend in str(exc)
            return
        # An attempt whose every profile is refused when made never reaches the backend.
        calls = verdict.evidence.split(" | ")
        assert all(c.startswith("refused (") for c in calls), verdict.evidence
        return
    verdict = asyncio.run(escape.attempt(profile))
    assert verdict.blocked, f"{escape.what}: {verdict.evidence}"


def by_name(name: str) -> Escape:
    return next(e for e in ESCAPES if e.name == name)


@pytest.mark.parametrize("name", ["read_host_secret", "see_host_dirs", "write_host_tmp",
                                  "loopback_tcp", "abstract_unix_socket", "host_env",
                                  "kill_host_process"])
def test_the_same_attempts_succeed_without_isolation(name: str) -> None:
    verdict = asyncio.run(by_name(name).attempt(
        SandboxProfile(backend="none", allow_unsandboxed=True)))
    assert not verdict.blocked, verdict.evidence


@pytest.mark.parametrize("name", ["loopback_tcp", "abstract_unix_socket"])
def test_the_network_is_reachable_only_when_the_profile_allows_it(name: str) -> None:
    verdict = asyncio.run(by_name(name).attempt(replace(base_profile("bwrap"), network=True)))
    assert not verdict.blocked, verdict.evidence


def test_a_host_dir_is_readable_once_the_profile_mounts_it(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    (tmp_path / "secret").write_text("visible-when-mounted")
    os.chmod(tmp_path / "secret", 0o644)
    hidden = run_command(f"cat {tmp_path}/secret", profile=SandboxProfile(backend="bwrap"))
    shown = run_command(f"cat {tmp_path}/secret",
                        profile=SandboxProfile(backend="bwrap", ro_paths=(str(tmp_path),)))
    assert "visible-when-mounted" not in hidden.stdout
    assert shown.stdout == "visible-when-mounted"


def test_the_check_prints_a_summary_per_backend() -> None:
    docker = engine_reason()
    image = ["--image", require_image()] if docker is None else []
    done = subprocess.run(
        [sys.executable, "-m", "underway.sandbox.escapes", "--backend", "bwrap", "--backend",
         "docker", "--only", "read_host_secret,loopback_tcp", *image],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bwrap: blocked 2/2" in done.stdout
    expected = "docker: blocked 2/2" if docker is None else "docker: unavailable, 0 escapes run"
    assert expected in done.stdout


def _bomb_processes() -> int:
    """Host processes of the user this process's fork-bomb check runs as (a user of its
    own: bombs of other test processes on the host are not counted)."""
    ids = _bomb_ids()
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == ids
    return count


@pytest.mark.skipif(os.geteuid() != 0, reason="as non-root every sandbox runs as the caller")
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_fork_bomb_check_leaves_the_profile_user_its_process_count(backend: str) -> None:
    """The process limit counts per user on the whole host (a container's processes
    included): the bomb runs as a user of its own, so while it holds every process it may,
    a bubblewrap command of the profile's user with a tight limit still runs (before, it
    failed to start: no process left to its user)."""
    profile = base_profile("bwrap")
    bombed = profile
    if backend == "docker":
        if (reason := engine_reason()) is not None:
            pytest.skip(f"no Docker engine here: {reason}")
        bombed = base_profile(backend, require_image())
    done = threading.Event()
    verdicts = []

    def bomb() -> None:
        verdicts.append(asyncio.run(by_name("fork_bomb").attempt(bombed)))
        done.set()

    thread = threading.Thread(target=bomb)
    thread.start()
    try:
        while _bomb_processes() < 20 and not done.is_set():
            done.wait(0.01)
        assert not done.is_set(), "the bomb ended before it held its processes"
        tight = replace(profile, limits=replace(profile.limits, max_processes=20))
        r = run_command(["/bin/sh", "-c", "id -u; echo ran"], profile=tight)
        assert r.ok and r.stdout.split() == [str(profile.uid), "ran"], r.stderr
    finally:
        thread.join(timeout=120)
    assert verdicts and verdicts[0].blocked, verdicts
