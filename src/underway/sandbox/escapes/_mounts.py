"""Escapes through what later calls mount: a command leaves a symlink, a hardlink or a
renamed directory where a profile path or the workspace lies, for the next call to bind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...errors import ConfigurationError
from ..errors import SandboxError, SandboxUnavailable
from ..profile import SandboxProfile
from ._catalogue import Verdict, escape, output_of, run_bash
from ._host import host_dir, marker


@contextlib.contextmanager
def _vault() -> Iterator[tuple[Path, str]]:
    """Host secrets out of every sandbox's reach: ``vault`` (mode 0700, the worker's)
    holds ``cfg/secret`` (mode 0644: only the directory keeps it out) and ``secret0600``
    (mode 0600). Both hold the token yielded with the vault."""
    token = uuid.uuid4().hex
    with host_dir() as bait:
        vault = bait / "vault"
        (vault / "cfg").mkdir(parents=True)
        vault.chmod(0o700)
        (vault / "cfg").chmod(0o755)
        for path, mode in ((vault / "cfg" / "secret", 0o644), (vault / "secret0600", 0o600)):
            path.write_text(token)
            path.chmod(mode)
        yield vault, token


@contextlib.contextmanager
def _workspace() -> Iterator[Path]:
    """A persistent workspace (mode 0777) in a host directory of its own."""
    with host_dir() as outer:
        ws = outer / "ws"
        ws.mkdir()
        ws.chmod(0o777)
        yield ws


async def _call(profile: SandboxProfile | Callable[[], SandboxProfile], script: str,
                workspace: Path | None = None) -> str:
    """What one call said, or why it was refused (the profile may be made by the call, so
    that a profile refused when made counts as a refusal)."""
    try:
        made = profile() if callable(profile) else profile
        return output_of(await run_bash(made, script, workspace))
    except SandboxUnavailable:
        raise
    except (SandboxError, ConfigurationError) as exc:
        return f"refused ({type(exc).__name__}: {str(exc)[:160]})"


async def _swap(profile: SandboxProfile, ws: Path, field_name: str, path: Path, plant: str,
                probe: str) -> list[str]:
    """The two-call attack on a profile path inside the workspace ``ws``: the profile is
    made (call 0 runs with it), call 1 — a command with the workspace, no more — runs
    ``plant``, then call 2 runs ``probe`` with the profile made before, and call 3 with
    one made after the swap."""
    def with_path() -> SandboxProfile:
        if field_name == "ro_paths":
            return replace(profile, ro_paths=(str(path),))
        return replace(profile, rw_paths=(str(path),))

    before = await _call(with_path, "true")
    pinned: SandboxProfile | Callable[[], SandboxProfile] = with_path
    with contextlib.suppress(ConfigurationError):
        pinned = with_path()
    said = [f"call 0: {await _call(pinned, probe, ws)}", f"(profile made: {before})",
            f"call 1: {await _call(profile, plant, ws)}"]
    said.append(f"call 2: {await _call(pinned, probe, ws)}")
    said.append(f"call 3 (profile made after): {await _call(with_path, probe, ws)}")
    return said


def _leaked(token: str, said: list[str]) -> Verdict:
    leaked = any(token in line for line in said)
    return Verdict(not leaked, ("READ THE SECRET; " if leaked else "") + " | ".join(said))


@escape("swap_ro_path", "swap a read-only path inside the workspace for a symlink to a "
                         "root-only directory, for the next call to mount")
async def swap_ro_path(profile: SandboxProfile) -> Verdict:
    with _vault() as (vault, token), _workspace() as ws:
        (ws / "cfg").mkdir(mode=0o777)
        said = await _swap(profile, ws, "ro_paths", ws / "cfg",
                           f"rm -rf cfg && ln -s {vault}/cfg cfg && ls -l cfg",
                           f"cat {ws}/cfg/secret {ws}/cfg/../secret0600")
    return _leaked(token, said)


@escape("swap_rw_path", "swap a writable path inside the workspace for a symlink to the "
                         "host's /tmp and to a world-writable host directory")
async def swap_rw_path(profile: SandboxProfile) -> Verdict:
    name = marker()
    said = []
    with host_dir() as drop:
        drop.chmod(0o777)
        for target in (Path("/tmp"), drop):
            with _workspace() as ws:
                (ws / "out").mkdir(mode=0o777)
                said += await _swap(profile, ws, "rw_paths", ws / "out",
                                    f"rm -rf out && ln -s {target} out",
                                    f"echo x > {ws}/out/{name}")
        landed = [str(p) for p in (Path("/tmp") / name, drop / name) if p.exists()]
        (Path("/tmp") / name).unlink(missing_ok=True)
    return Verdict(not landed, (f"WROTE {landed}; " if landed else "") + " | ".join(said))


@escape("swap_parent_dir", "replace a directory above a read-only path with a symlink")
async def swap_parent_dir(profile: SandboxProfile) -> Verdict:
    with _vault() as (vault, token), _workspace() as ws:
        (ws / "a" / "cfg").mkdir(parents=True)
        for d in (ws / "a", ws / "a" / "cfg"):
            d.chmod(0o777)
        said = await _swap(profile, ws, "ro_paths", ws / "a" / "cfg",
                           f"rm -rf a && ln -s {vault} a", f"cat {ws}/a/cfg/secret")
    return _leaked(token, said)


@escape("dotdot_symlink", "swap a read-only path for a relative symlink climbing out with ..")
async def dotdot_symlink(profile: SandboxProfile) -> Verdict:
    with _vault() as (vault, token), _workspace() as ws:
        (ws / "cfg").mkdir(mode=0o777)
        climb = "../" * 12 + str(vault / "cfg").lstrip("/")
        said = await _swap(profile, ws, "ro_paths", ws / "cfg",
                           f"rm -rf cfg && ln -s {climb} cfg", f"cat {ws}/cfg/secret")
    return _leaked(token, said)


@escape("hardlink_planted", "hardlink root-owned files into the workspace; mount a path that "
                             "became a hardlink to a root-only file on the same device")
async def hardlink_planted(profile: SandboxProfile) -> Verdict:
    with _vault() as (vault, token), _workspace() as ws, host_dir() as shared:
        secret = vault / "secret0600"
        said = [await _call(profile, "ln /usr/bin/env e1; ln /etc/ld.so.cache e2; "
                                     "ls e1 e2 2>&1", ws)]
        # Planted from outside (a sandbox cannot link across its mounts): a hardlink in
        # the workspace, and one in place of a mounted file, both on the secret's device.
        os.link(secret, ws / "planted")
        cfg = shared / "cfg.txt"
        cfg.write_text("config\n")
        cfg.chmod(0o644)
        pinned = replace(profile, ro_paths=(str(cfg),))
        said.append(f"before: {await _call(pinned, f'cat {cfg}')}")
        os.link(vault / "cfg" / "secret", shared / "next")
        os.replace(shared / "next", cfg)
        same = os.stat(cfg).st_dev == os.stat(secret).st_dev
        said.append(f"same device: {same}")
        said.append(f"workspace: {await _call(profile, 'cat planted', ws)}")
        said.append(f"pinned: {await _call(pinned, f'cat {cfg}')}")
        said.append("in workspace: " + await _call(
            lambda: replace(profile, ro_paths=(str(ws / "planted"),)),
            f"cat {ws}/planted", ws))
    verdict = _leaked(token, said)
    if os.geteuid() != 0:
        # The sandbox runs as the worker, who may read its own file in the workspace.
        verdict = _leaked(token, [line for line in said if not line.startswith("workspace")])
    return verdict


@escape("rename_race", "swap a read-only path back and forth while other calls mount it")
async def rename_race(profile: SandboxProfile) -> Verdict:
    with _vault() as (vault, token), _workspace() as ws:
        (ws / "cfg").mkdir(mode=0o777)
        cfg = ws / "cfg"

        def with_cfg() -> SandboxProfile:
            return replace(profile, ro_paths=(str(cfg),))

        pinned: SandboxProfile | Callable[[], SandboxProfile] = with_cfg
        with contextlib.suppress(ConfigurationError):
            pinned = with_cfg()
        racer = asyncio.ensure_future(_call(profile, (
            "end=$((SECONDS + 3)); while [ $SECONDS -lt $end ]; do mv cfg cfg.real; "
            f"ln -s {vault}/cfg cfg; sleep 0.01; rm cfg; mv cfg.real cfg; done"), ws))
        said: list[str] = []
        for _ in range(6):
            said += await asyncio.gather(
                _call(pinned, f"cat {cfg}/secret", ws),
                _call(with_cfg, f"cat {cfg}/secret", ws))
        said.append(f"racer: {await racer}")
    return _leaked(token, said)


@escape("workspace_swap", "replace the workspace itself with a symlink: from inside, and "
                           "from a call that can write its parent")
async def workspace_swap(profile: SandboxProfile) -> Verdict:
    name = marker()
    with _vault() as (vault, token), host_dir() as share, host_dir() as rootdir, \
            _workspace() as own:
        said = [await _call(profile, (
            "cd / && { mv /workspace /w2; rmdir /workspace; ln -s / /workspace; } 2>&1; true"),
            own)]
        share.chmod(0o777)
        ws = share / "ws"
        ws.mkdir(mode=0o777)
        ws.chmod(0o777)
        owners = {p: (os.stat(p).st_uid, os.stat(p).st_gid) for p in (vault, rootdir)}

        def writer() -> SandboxProfile:
            return replace(profile, rw_paths=(str(share),))

        try:
            for target in (vault, rootdir):
                said.append(await _call(writer, f"mv {ws} {share}/old; ln -s {target} {ws}"))
                said.append(await _call(profile, f"cat cfg/secret; echo x > {name}", ws))
                if ws.is_symlink():
                    ws.unlink()
                    (share / "old").rename(ws)
        finally:
            chowned = [str(p) for p, ids in owners.items()
                       if (os.stat(p).st_uid, os.stat(p).st_gid) != ids]
            for p, ids in owners.items():
                os.chown(p, *ids)
        landed = [str(p) for p in (vault / name, rootdir / name) if p.exists()]
    verdict = _leaked(token, said)
    bad = chowned or landed
    return Verdict(verdict.blocked and not bad,
                   (f"CHOWNED {chowned} WROTE {landed}; " if bad else "") + verdict.evidence)


@escape("mount_target_symlink", "mount at a target inside a writable mount, where a command "
                                 "can leave a symlink for the next mount to follow")
async def mount_target_symlink(profile: SandboxProfile) -> Verdict:
    with host_dir() as share:
        share.chmod(0o777)
        said = []
        layouts: list[dict[str, Any]] = [
            {"rw_paths": (str(share),), "workspace_dir": f"{share}/ws"},
            {"rw_paths": (str(share),), "ro_paths": (f"{share}/ref",)},
        ]
        for kwargs in layouts:
            def made(kw: dict[str, Any] = kwargs) -> SandboxProfile:
                return replace(profile, **kw)

            # Twice: the first call leaves the symlinks a second would mount through.
            for _ in range(2):
                said.append(await _call(made, f"ln -s /usr/bin {share}/ws; "
                                              f"ln -s /usr/bin {share}/ref; pwd -P; true"))
    accepted = [line for line in said if not line.startswith("refused")]
    return Verdict(not accepted, " | ".join(said))

