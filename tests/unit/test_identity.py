"""Lease owner ids: a dead local holder is recognised, nobody else is judged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from underway import identity
from underway.identity import owner_is_dead, worker_identity


def test_this_process_is_alive_and_a_finished_one_is_dead() -> None:
    me = worker_identity()
    assert not owner_is_dead(me)
    child = subprocess.run(
        [sys.executable, "-c", "from underway.identity import worker_identity as w; print(w())"],
        capture_output=True, text=True, check=True,
    )
    assert owner_is_dead(child.stdout.strip())


def test_other_hosts_namespaces_and_malformed_ids_are_never_judged_dead() -> None:
    host, space, _, _ = worker_identity().split(":")
    assert not owner_is_dead(f"elsewhere:{space}:999999:1")
    assert not owner_is_dead(f"{host}:000000000000:999999:1")
    assert not owner_is_dead("worker-7")
    assert not owner_is_dead(f"{host}:{space}:notapid:1")


def test_a_recycled_pid_is_not_the_original_holder() -> None:
    host, space, pid, start = worker_identity().split(":")
    assert owner_is_dead(f"{host}:{space}:{pid}:{int(start) + 1}")


def test_a_proc_file_with_bytes_beyond_ascii_is_read_not_raised(tmp_path: Path) -> None:
    # /proc/PID/stat holds the process name as the process set it, in any bytes.
    stat = tmp_path / "stat"
    stat.write_bytes(b"4242 (caf\xc3\xa9 w\xff) S 1 2 3\n")
    assert identity._read(str(stat)) == "4242 (caf\xc3\xa9 w\xff) S 1 2 3"
    assert identity._read(str(tmp_path / "missing")) == ""
