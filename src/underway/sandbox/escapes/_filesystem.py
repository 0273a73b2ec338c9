"""Escapes through the filesystem: host secrets, host directories, writes outside the
workspace, symlinks and ``..`` out of it, and a file past its size limit."""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import replace
from pathlib import Path

from ..profile import SandboxProfile
from ._catalogue import Verdict, escape, output_of, run_bash
from ._host import host_dir, marker


@escape("read_host_secret", "read a world-readable secret in the host's home and /tmp")
async def read_host_secret(profile: SandboxProfile) -> Verdict:
    token = uuid.uuid4().hex
    home_secret = Path.home() / f"underway-secret-{token[:8]}"
    with host_dir() as bait:
        tmp_secret = bait / "secret"
        for path in (home_secret, tmp_secret):
            path.write_text(token)
            path.chmod(0o644)
        try:
            r = await run_bash(profile, (
                f"cat {home_secret} {tmp_secret}; cat /proc/1/root{home_secret}; "
                f"grep -s {token} {Path.home()}/* /tmp/*/* /home/*/* 2>/dev/null; "
                f"ls -la {Path.home()} {bait}"
            ))
        finally:
            home_secret.unlink(missing_ok=True)
    leaked = token in r.stdout + r.stderr
    return Verdict(not leaked, ("read the secret: " if leaked else "") + output_of(r))


@escape("see_host_dirs", "see the host's home, working directory and other top-level dirs")
async def see_host_dirs(profile: SandboxProfile) -> Verdict:
    # A file planted in each host directory tells the host's directory from one of the same
    # name that the sandbox has of its own (a container image has its own /var and /home).
    inside = {"/", "/tmp", "/usr", "/etc", "/proc", "/dev", profile.workspace_dir}
    paths = sorted({str(p) for p in (Path.home(), Path.cwd(), "/var", "/opt", "/home", "/srv",
                                     "/mnt", "/boot", "/run")
                    if os.path.isdir(p) and str(p) not in inside
                    and not str(p).startswith(("/usr/", "/etc/", "/tmp/"))})
    name = f".{marker()}"
    planted = []
    try:
        for p in paths:
            with contextlib.suppress(OSError):
                Path(p, name).write_text("host\n")
                Path(p, name).chmod(0o644)
                planted.append(p)
        script = "".join(f'[ -e "{p}/{name}" ] && echo "VISIBLE {p}"; '
                         for p in planted) + "true"
        r = await run_bash(profile, script)
    finally:
        for p in planted:
            Path(p, name).unlink(missing_ok=True)
    seen = [line for line in r.stdout.splitlines() if line.startswith("VISIBLE")]
    return Verdict(bool(planted) and not seen and r.exit_code == 0,
                   f"planted a file in {', '.join(planted) or 'no directory'}: "
                   + ("; ".join(seen) or "none visible"))


@escape("write_outside", "write into /etc, /usr, /usr/local, the host's home and /")
async def write_outside(profile: SandboxProfile) -> Verdict:
    name = marker()
    targets = [Path(d) / name for d in ("/etc", "/usr", "/usr/local", str(Path.home()), "/")]
    try:
        r = await run_bash(profile, "; ".join(f"echo x > {t}" for t in targets))
        landed = [str(t) for t in targets if t.exists()]
    finally:
        for t in targets:
            t.unlink(missing_ok=True)
    return Verdict(not landed, (f"created {landed}; " if landed else "") + output_of(r))


@escape("write_host_tmp", "write into the host's /tmp")
async def write_host_tmp(profile: SandboxProfile) -> Verdict:
    target = Path("/tmp") / marker()
    try:
        r = await run_bash(profile, f"echo x > {target} && echo wrote-private-tmp")
        landed = target.exists()
    finally:
        target.unlink(missing_ok=True)
    return Verdict(not landed, ("host /tmp written; " if landed else "") + output_of(r))


@escape("symlink_out", "write through symlinks from the workspace to host paths")
async def symlink_out(profile: SandboxProfile) -> Verdict:
    name = marker()
    targets = [Path.home() / name, Path("/etc") / name]
    with host_dir() as ws:
        os.chmod(ws, 0o777)
        try:
            r = await run_bash(profile, (
                f"ln -s {targets[0]} a; echo x > a; ln -s /etc b; echo x > b/{name}; "
                f"ln -s / c; echo x > c{targets[0]}; ls -la"
            ), workspace=ws)
            landed = [str(t) for t in targets if t.exists()]
        finally:
            for t in targets:
                t.unlink(missing_ok=True)
    return Verdict(not landed, (f"created {landed}; " if landed else "") + output_of(r))


@escape("dotdot_out", "climb out of the workspace with ..")
async def dotdot_out(profile: SandboxProfile) -> Verdict:
    name = marker()
    with host_dir() as outer:
        ws = outer / "ws"
        ws.mkdir(mode=0o777)
        os.chmod(ws, 0o777)
        r = await run_bash(profile, (
            f"echo x > ../{name}; echo x > ../../{name}; "
            f"echo x > ../../../../../../{str(Path.home()).lstrip('/')}/{name}; "
            f"cd .. && echo x > {name}"
        ), workspace=ws)
        landed = [str(p) for p in (outer / name, outer.parent / name, Path.home() / name)
                  if p.exists()]
        for p in (outer.parent / name, Path.home() / name):
            p.unlink(missing_ok=True)
    return Verdict(not landed, (f"created {landed}; " if landed else "") + output_of(r))


@escape("huge_file", "write a 64 MiB file with file_size_mb=1")
async def huge_file(profile: SandboxProfile) -> Verdict:
    limited = replace(profile, limits=replace(profile.limits, file_size_mb=1))
    with host_dir() as ws:
        os.chmod(ws, 0o777)
        r = await run_bash(limited, "head -c 67108864 /dev/zero > big", workspace=ws)
        size = (ws / "big").stat().st_size if (ws / "big").exists() else 0
    return Verdict(size <= 1024 * 1024, f"the file reached {size} bytes; " + output_of(r))
