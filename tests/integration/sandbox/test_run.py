"""Running commands in the bubblewrap sandbox: what a caller gets back (output, exit
code, duration, truncation, timeouts), what the command sees (environment, workspace,
mounts, user), and cleanup when the caller gives up."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from underway.errors import ConfigurationError
from underway.sandbox import (
    Limits,
    SandboxError,
    SandboxProfile,
    run_command,
    run_command_async,
)
from underway.sandbox import (
    _bwrap as bwrap,
)
from underway.sandbox._workspace import CallDirs
from underway.sandbox.escapes import marker, processes_with

BWRAP = SandboxProfile(backend="bwrap", limits=Limits(timeout_s=30))
PATIENCE_S = 120.0
"""How long a test waits for a process to start or go: a guard against hangs only."""


def test_output_exit_code_and_duration_are_captured() -> None:
    r = run_command("echo out; echo err >&2; exit 3", profile=BWRAP)
    assert r.stdout == "out\n"
    assert r.stderr == "err\n"
    assert r.exit_code == 3
    assert not r.ok
    assert r.duration_ms > 0
    assert not r.timed_out and not r.stdout_truncated and not r.stderr_truncated
    assert r.backend == "bwrap"
    assert r.profile_digest == BWRAP.digest()


def test_an_argv_runs_as_given_and_stdin_is_fed() -> None:
    r = run_command(["/bin/cat"], profile=BWRAP, stdin="line one\nline two\n")
    assert r.ok and r.stdout == "line one\nline two\n"
    quoted = run_command(["/usr/bin/printf", "%s|", "a b", "$HOME", "*"], profile=BWRAP)
    assert quoted.stdout == "a b|$HOME|*|", "no shell between the argv and the program"


def test_large_stdin_the_command_ignores_does_not_hang() -> None:
    r = run_command("true", profile=BWRAP, stdin="x" * 5_000_000)
    assert r.ok


def test_output_past_the_cap_is_cut_with_a_visible_marker() -> None:
    profile = SandboxProfile(backend="bwrap", limits=Limits(output_cap_bytes=100))
    r = run_command("head -c 1000000 /dev/zero | tr '\\0' a; echo -n short >&2", profile=profile)
    assert r.stdout == "a" * 100 + "\n[... truncated 999900 bytes]"
    assert r.stdout_truncated
    assert r.stderr == "short" and not r.stderr_truncated, "each stream has its own cap"
    assert r.ok


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    r = run_command("printf 'ok \\377\\376'", profile=BWRAP)
    assert r.stdout == "ok \ufffd\ufffd"


def test_the_command_runs_unprivileged_in_its_workspace_with_only_the_base_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("UNDERWAY_TEST_PASSED", "passed-through")
    monkeypatch.setenv("UNDERWAY_TEST_HIDDEN", "hidden")
    profile = SandboxProfile(backend="bwrap", env_allow=("UNDERWAY_TEST_PASSED",))
    r = run_command("id -u; pwd; env | sort", profile=profile, env={"GIVEN": "by call"})
    lines = r.stdout.splitlines()
    if os.geteuid() == 0:
        assert lines[0] == "65534", "root drops to the sandbox user"
    assert lines[1] == "/workspace"
    env = dict(line.split("=", 1) for line in lines[2:])
    assert env["UNDERWAY_TEST_PASSED"] == "passed-through"
    assert env["GIVEN"] == "by call"
    assert env["HOME"] == "/workspace"
    assert "UNDERWAY_TEST_HIDDEN" not in env


def test_the_root_holds_only_system_dirs_and_is_read_only() -> None:
    r = run_command("ls /; touch /new-file || echo refused", profile=BWRAP)
    assert set(r.stdout.split()) - {"refused"} <= {
        "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr",
        "workspace",
    }
    assert "refused" in r.stdout


def test_a_given_workspace_keeps_files_between_calls_and_a_fresh_one_does_not(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    first = run_command("echo kept > note.txt", profile=BWRAP, workspace=ws)
    assert first.ok, first.stderr
    assert (ws / "note.txt").read_text() == "kept\n"
    assert run_command("cat note.txt", profile=BWRAP, workspace=ws).stdout == "kept\n"
    run_command("echo lost > note.txt", profile=BWRAP)
    assert not run_command("cat note.txt", profile=BWRAP).ok


def test_profile_paths_are_shown_read_only_or_writable(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    (data / "in.txt").write_text("input")
    os.chmod(tmp_path, 0o755)
    os.chmod(data, 0o755)
    os.chmod(data / "in.txt", 0o644)
    os.chmod(out, 0o777)
    profile = SandboxProfile(backend="bwrap", ro_paths=(str(data),), rw_paths=(str(out),))
    r = run_command(f"cat {data}/in.txt > {out}/copy.txt; echo x > {data}/new || echo ro",
                    profile=profile)
    assert "ro" in r.stdout
    assert (out / "copy.txt").read_text() == "input"
    assert not (data / "new").exists()


def test_a_path_the_sandbox_user_cannot_reach_is_still_mounted(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root worker stages paths for the sandbox user")
    hidden = tmp_path / "private"
    (hidden / "data").mkdir(parents=True)
    os.chmod(hidden, 0o700)  # the sandbox user cannot even look inside
    os.chmod(hidden / "data", 0o755)
    (hidden / "data" / "f").write_text("reached\n")
    os.chmod(hidden / "data" / "f", 0o644)
    profile = SandboxProfile(backend="bwrap", ro_paths=(str(hidden / "data"),))
    r = run_command(f"cat {hidden}/data/f; ls {hidden}", profile=profile)
    assert r.stdout.startswith("reached"), r.stderr
    assert r.stdout.split() == ["reached", "data"], "only the mounted path, not its parent"


def test_the_time_limit_kills_the_command_and_says_so() -> None:
    tag = marker()
    profile = SandboxProfile(backend="bwrap", limits=Limits(timeout_s=0.5))
    r = run_command(["/bin/bash", "-c", f"exec -a {tag} sleep 60"], profile=profile)
    assert r.timed_out and not r.ok
    assert processes_with(tag) == []


def test_cancelling_the_call_kills_the_command() -> None:
    tag = marker()

    async def cancel_when_running() -> None:
        task = asyncio.create_task(run_command_async(
            ["/bin/bash", "-c", f"exec -a {tag} sleep 300"], profile=BWRAP))
        deadline = time.monotonic() + PATIENCE_S
        while not processes_with(tag):
            assert time.monotonic() < deadline, "the command never started"
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_when_running())
    assert processes_with(tag) == []


def test_a_mount_that_does_not_exist_fails_before_anything_runs(tmp_path: Path) -> None:
    profile = SandboxProfile(backend="bwrap", ro_paths=(str(tmp_path / "missing"),))
    with pytest.raises(SandboxError, match=r"missing'? does not exist"):
        run_command("true", profile=profile)


def test_a_workspace_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="not an existing directory"):
        run_command("true", profile=BWRAP, workspace=tmp_path / "nope")


@pytest.mark.parametrize("command", ["", "   ", [], ["ok", 3]])
def test_malformed_commands_are_refused(command: object) -> None:
    with pytest.raises(ConfigurationError, match="command"):
        run_command(command, profile=BWRAP)  # type: ignore[arg-type]


def test_bad_env_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="'A-B' is not a variable name"):
        run_command("true", profile=BWRAP, env={"A-B": "x"})


def test_the_blocking_form_refuses_to_run_inside_an_event_loop() -> None:
    async def inside() -> None:
        run_command("true", profile=BWRAP)

    with pytest.raises(ConfigurationError, match="await run_command_async"):
        asyncio.run(inside())


def test_sandboxes_orphaned_by_a_dead_worker_are_reaped() -> None:
    """What a worker SIGKILLed while bubblewrap set a sandbox up leaves behind: a sandbox
    whose parent is gone before either parent-death signal took hold, running on. The
    next process to use the sandbox kills it: first the orphaned bubblewrap, then the
    command it leaves orphaned in turn."""
    tag = marker()
    with CallDirs(None, bwrap.as_ids(BWRAP)) as dirs:
        launch = bwrap.plan(BWRAP, ["/bin/bash", "-c", f"exec -a {tag} sleep 300"], dirs, None)
        # The race, made certain: no parent-death signal anywhere.
        argv = ["clear" if a == "KILL" else a for a in launch.argv if a != "--die-with-parent"]
        # `&` in a shell that exits at once: bubblewrap is reparented to init.
        subprocess.run(
            ["/bin/sh", "-c", 'exec "$@" >/dev/null 2>&1 </dev/null &', "sh", *argv],
            env=launch.env, pass_fds=launch.pass_fds, preexec_fn=launch.setup, check=True,
        )
        launch.release()
        deadline = time.monotonic() + PATIENCE_S
        while not [p for p in processes_with(tag) if _argv0_is(p, tag)]:
            assert time.monotonic() < deadline, "the orphaned sandbox never started"
            time.sleep(0.02)
        path = bwrap.binary()
        assert path is not None
        uid = (bwrap.as_ids(BWRAP) or (os.geteuid(), 0))[0]
        reaped: list[int] = []
        deadline = time.monotonic() + PATIENCE_S
        while processes_with(tag) and time.monotonic() < deadline:
            reaped += bwrap.reap_orphans(path, uid)
            time.sleep(0.05)
        # Both carry the tag, so both are gone: the orphaned bubblewrap and the command it
        # left. (Whoever reaped them: any process's first use of the sandbox reaps too.)
        assert processes_with(tag) == []


def _argv0_is(pid: int, tag: str) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(tag.encode())
    except OSError:
        return False


def test_without_setpriv_and_prlimit_the_same_user_and_limits_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profile = SandboxProfile(backend="bwrap", limits=Limits(
        memory_mb=300, max_processes=20, cpu_seconds=7, file_size_mb=3))
    script = ["/bin/bash", "-c", "id -u; id -G; ulimit -v -u -t -f -c"]
    chained = run_command(script, profile=profile)
    monkeypatch.setattr(bwrap, "exec_chain", lambda ids, rlimits: None)
    forked = run_command(script, profile=profile)
    assert chained.ok and forked.ok, (chained.stderr, forked.stderr)
    assert chained.stdout == forked.stdout
    limits = [line.split()[-1] for line in chained.stdout.splitlines()[-5:]]
    assert limits == [str(300 * 1024), "20", "7", str(3 * 1024), "0"], chained.stdout
    if os.geteuid() == 0:
        assert chained.stdout.splitlines()[:2] == ["65534", "65534"], "no supplementary groups"
