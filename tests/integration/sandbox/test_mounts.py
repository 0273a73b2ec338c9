"""What a call mounts is the object resolved when the profile (or the tool) was made: a
path replaced since — by a symlink, a hardlink, a renamed directory, from outside or in
a race — makes the call refuse to run, never mount something else. The escape catalogue
(``tests/adversarial/sandbox/test_escapes.py``) attacks the same rules from inside the
sandbox, on every backend."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from underway.errors import ConfigurationError
from underway.sandbox import SandboxError, SandboxProfile, run_command, shell_tool
from underway.sandbox._mounts import HostPath
from underway.sandbox._workspace import CallDirs, pin_workspace
from underway.sandbox.run import run_command_async

BWRAP = SandboxProfile(backend="bwrap")
TOKEN = "the-vault-secret"


@pytest.fixture(params=["by-descriptor", "staged"])
def host(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A host directory (0755) with ``vault/cfg/secret`` in a root-only directory and a
    mountable ``data/cfg/ok``: in a directory the sandbox user can reach (bound by
    descriptor), or, for a root worker, one it cannot (staged first)."""
    if request.param == "staged" and os.geteuid() != 0:
        pytest.skip("only a root worker stages paths for the sandbox user")
    if request.param == "by-descriptor":
        base = Path(tempfile.mkdtemp(prefix="underway-mounts-"))
        request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
        tmp_path = base
    os.chmod(tmp_path, 0o755)
    vault = tmp_path / "vault"
    (vault / "cfg").mkdir(parents=True)
    (vault / "cfg" / "secret").write_text(TOKEN)
    os.chmod(vault, 0o700)
    for d in (vault / "cfg", tmp_path / "data", tmp_path / "data" / "cfg"):
        d.mkdir(exist_ok=True)
        os.chmod(d, 0o755)
    (tmp_path / "data" / "cfg" / "ok").write_text("ok")
    os.chmod(vault / "cfg" / "secret", 0o644)
    os.chmod(tmp_path / "data" / "cfg" / "ok", 0o644)
    yield tmp_path


def swap_for_symlink(path: Path, target: Path) -> None:
    path.rename(path.with_name(path.name + ".old"))
    path.symlink_to(target)


def test_a_path_swapped_for_a_symlink_after_the_profile_was_made_is_refused(host: Path) -> None:
    cfg = host / "data" / "cfg"
    profile = SandboxProfile(backend="bwrap", ro_paths=(str(cfg),))
    assert run_command(f"cat {cfg}/ok", profile=profile).stdout == "ok"
    swap_for_symlink(cfg, host / "vault" / "cfg")
    with pytest.raises(SandboxError, match="is not what it was when it was resolved"):
        run_command(f"cat {cfg}/secret", profile=profile)


def test_a_parent_swapped_for_a_symlink_is_refused(host: Path) -> None:
    cfg = host / "data" / "cfg"
    profile = SandboxProfile(backend="bwrap", ro_paths=(str(cfg),))
    swap_for_symlink(host / "data", host / "vault")
    with pytest.raises(SandboxError, match=r"no longer be reached|is not what it was"):
        run_command(f"cat {cfg}/secret", profile=profile)


def test_a_file_replaced_by_a_hardlink_on_the_same_device_is_refused(host: Path) -> None:
    mounted = host / "data" / "cfg" / "ok"
    secret = host / "vault" / "cfg" / "secret"
    assert os.stat(mounted).st_dev == os.stat(secret).st_dev
    profile = SandboxProfile(backend="bwrap", ro_paths=(str(mounted),))
    assert run_command(f"cat {mounted}", profile=profile).stdout == "ok"
    os.link(secret, host / "planted")
    os.replace(host / "planted", mounted)
    with pytest.raises(SandboxError, match="is now another object"):
        run_command(f"cat {mounted}", profile=profile)


def test_a_race_from_outside_never_mounts_anything_else(host: Path) -> None:
    """A host process swaps the mounted directory for a symlink and back as fast as it
    can while calls start: each call mounts the pinned directory or refuses."""
    cfg = host / "data" / "cfg"
    profile = SandboxProfile(backend="bwrap", ro_paths=(str(cfg),))
    stop = threading.Event()
    swaps = 0

    def race() -> None:
        nonlocal swaps
        while not stop.is_set():
            cfg.rename(host / "data" / "real")
            cfg.symlink_to(host / "vault" / "cfg")
            cfg.unlink()
            (host / "data" / "real").rename(cfg)
            swaps += 1

    async def calls() -> list[str]:
        said = []
        for _ in range(12):
            try:
                r = await run_command_async(f"cat {cfg}/ok {cfg}/secret", profile=profile)
                said.append(r.stdout + r.stderr)
            except SandboxError as exc:
                said.append(f"refused: {exc}")
        return said

    thread = threading.Thread(target=race)
    thread.start()
    try:
        said = asyncio.run(calls())
    finally:
        stop.set()
        thread.join()
    assert swaps > 0
    assert not any(TOKEN in s for s in said), said


def test_a_profile_path_inside_the_workspace_is_refused_whoever_runs_the_command(
    host: Path,
) -> None:
    """The rule alone, as for a worker that is not root (no sandbox user to judge)."""
    ws = host / "data"
    profile = SandboxProfile(backend="bwrap", ro_paths=(str(ws / "cfg"),))
    with CallDirs(ws, None) as dirs, pytest.raises(SandboxError, match="lies inside the workspace"):
        dirs.bind(profile, None)
    with pytest.raises(ConfigurationError, match="lies inside the workspace"):
        shell_tool(profile=profile, workspace=ws)


def test_a_profile_path_reached_through_a_symlink_in_the_workspace_is_refused(
    host: Path,
) -> None:
    """Resolved now, the path leads out of the workspace; but the symlink that leads
    there lies in it, and a command could re-point it."""
    ws = host / "data"
    (ws / "link").symlink_to(host / "vault" / "cfg")
    profile = SandboxProfile(backend="bwrap", ro_paths=(str(ws / "link"),))
    assert profile.host_mounts(pin_workspace(ws))[0].source.via == (str(ws / "link"),)
    with CallDirs(ws, None) as dirs, pytest.raises(SandboxError, match="lies inside the workspace"):
        dirs.bind(profile, None)


def test_resolution_climbs_from_a_symlink_target_on_dotdot(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "x").mkdir()
    (tmp_path / "a" / "b" / "up").symlink_to("../../x")
    (tmp_path / "link").symlink_to(tmp_path / "a" / "b")
    pin = HostPath.resolve(tmp_path / "link" / "up" / ".." / "x", what="ro_paths entry")
    assert pin.real == str(tmp_path / "x")
    assert pin.via == (str(tmp_path / "link"), str(tmp_path / "a" / "b" / "up"))


def test_a_tool_workspace_swapped_for_a_symlink_is_refused(host: Path) -> None:
    ws = host / "ws"
    ws.mkdir()
    pinned = pin_workspace(ws)
    swap_for_symlink(ws, host / "vault" / "cfg")
    owner = os.stat(host / "vault" / "cfg").st_uid
    with pytest.raises(SandboxError, match="is not what it was"):
        asyncio.run(run_command_async("cat secret", profile=BWRAP, workspace=pinned))
    assert os.stat(host / "vault" / "cfg").st_uid == owner, "never handed to the sandbox user"


def test_the_mount_descriptors_do_not_reach_the_command(host: Path) -> None:
    cfg = host / "data" / "cfg"
    r = run_command("ls /proc/self/fd", profile=SandboxProfile(backend="bwrap",
                                                              ro_paths=(str(cfg),)))
    assert r.stdout.split() == ["0", "1", "2", "3"], r.stdout + r.stderr


def test_a_profile_path_that_appears_later_is_pinned_by_the_first_call(host: Path) -> None:
    later = host / "data" / "later"
    profile = SandboxProfile(backend="bwrap", ro_paths=(str(later),))
    with pytest.raises(SandboxError, match="does not exist"):
        run_command("true", profile=profile)
    later.mkdir(mode=0o755)
    assert run_command(f"ls -d {later}", profile=profile).ok
    swap_for_symlink(later, host / "vault" / "cfg")
    with pytest.raises(SandboxError, match="is not what it was"):
        run_command("true", profile=profile)


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root worker runs commands as another user")
def test_a_directory_the_sandbox_user_may_change_is_refused_on_the_way(host: Path) -> None:
    os.chmod(host / "data", 0o777)
    with pytest.raises(ConfigurationError, match=r"uid 65534\) may change .*/data/cfg"):
        SandboxProfile(backend="bwrap", ro_paths=(str(host / "data" / "cfg"),))
    os.chmod(host / "data", 0o1777)  # sticky: only owners may rename what is in it
    SandboxProfile(backend="bwrap", ro_paths=(str(host / "data" / "cfg"),))
