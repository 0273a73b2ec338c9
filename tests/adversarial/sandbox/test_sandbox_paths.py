"""Invariant: a sandboxed command can never change what a later call mounts.

The attack of issue 10, end to end: an agent's flow, run by a real engine on SQLite and
PostgreSQL, first calls a shell tool whose persistent workspace holds a path another
tool mounts, and swaps that path (or a directory above it) for a symlink — to a
root-only directory holding a secret, to the host's /tmp, to a world-writable host
directory. Its second call goes through the tool that mounts the path. That call must
be refused, the secret never read, no host directory written; and a tool whose own
profile mounts a path inside its own workspace is refused when it is made.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.errors import ConfigurationError
from underway.sandbox import Limits, SandboxProfile, shell_tool
from underway.store import connect

LIMITS = Limits(timeout_s=20)
PROFILE = SandboxProfile(backend="bwrap", limits=LIMITS)


@dataclass
class Host:
    """The bait: ``vault`` (0700, root) holds ``cfg/secret`` (0644) and ``secret0600``
    (0600); ``drop`` is a world-writable host directory no profile shows; ``ws`` is the
    shell tool's persistent workspace, with ``cfg``, ``a/cfg`` and ``out`` in it."""

    root: Path
    vault: Path
    drop: Path
    ws: Path
    token: str
    marker: str


@pytest.fixture
def host() -> Iterator[Host]:
    root = Path(tempfile.mkdtemp(prefix="underway-adversarial-"))
    os.chmod(root, 0o755)
    token, marker = uuid.uuid4().hex, f"underway-marker-{uuid.uuid4().hex[:12]}"
    vault, drop, ws = root / "vault", root / "drop", root / "ws"
    (vault / "cfg").mkdir(parents=True)
    for path, mode in ((vault / "cfg" / "secret", 0o644), (vault / "secret0600", 0o600)):
        path.write_text(token)
        os.chmod(path, mode)
    os.chmod(vault, 0o700)
    for d in (drop, ws, ws / "cfg", ws / "a", ws / "a" / "cfg", ws / "out"):
        d.mkdir(exist_ok=True)
        os.chmod(d, 0o777)
    for d in (ws, ws / "a"):
        os.chmod(d, 0o755)  # until the shell tool's first call hands ws to its user
    try:
        yield Host(root, vault, drop, ws, token, marker)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        (Path("/tmp") / marker).unlink(missing_ok=True)


class Seen(BaseModel):
    said: list[str] = []


def attacks(h: Host) -> dict[str, tuple[dict[str, Any], str, str]]:
    """name -> (the mounting tool's profile options, what call 1 plants, what call 2 does)."""
    climb = "../" * 12 + str(h.vault / "cfg").lstrip("/")
    return {
        "ro path -> root-only dir": ({"ro_paths": (str(h.ws / "cfg"),)},
                                     f"rm -rf cfg && ln -s {h.vault}/cfg cfg",
                                     f"cat {h.ws}/cfg/secret {h.ws}/cfg/../secret0600"),
        "parent dir -> root-only dir": ({"ro_paths": (str(h.ws / "a" / "cfg"),)},
                                        f"mv a a.old && ln -s {h.vault} a",
                                        f"cat {h.ws}/a/cfg/secret"),
        "ro path -> .. climb": ({"ro_paths": (str(h.ws / "cfg"),)},
                                f"rm -rf cfg && ln -s {climb} cfg", f"cat {h.ws}/cfg/secret"),
        "rw path -> host /tmp": ({"rw_paths": (str(h.ws / "out"),)},
                                 "rm -rf out && ln -s /tmp out",
                                 f"echo x > {h.ws}/out/{h.marker}"),
        "rw path -> host dir": ({"rw_paths": (str(h.ws / "out"),)},
                                f"rm -rf out && ln -s {h.drop} out",
                                f"echo x > {h.ws}/out/{h.marker}"),
    }


ATTACKS = ["ro path -> root-only dir", "parent dir -> root-only dir", "ro path -> .. climb",
           "rw path -> host /tmp", "rw path -> host dir"]


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_command_cannot_change_what_a_later_call_mounts(db_url: str, host: Host,
                                                          attack: str) -> None:
    options, plant, probe = attacks(host)[attack]
    shell = shell_tool(name="shell", profile=PROFILE, workspace=host.ws)
    mounting = shell_tool(name="mounting", profile=SandboxProfile(
        backend="bwrap", limits=LIMITS, **options))
    flow: uw.Flow[Seen, Any] = uw.Flow("sandbox_paths", state=Seen)

    @flow.step
    async def attack_step(ctx: uw.RunContext[Seen, Any]) -> Any:
        for tool, command in ((mounting, probe), (shell, plant), (mounting, probe)):
            try:
                r = await ctx.call(tool, {"command": command})
                out = r if isinstance(r, dict) else r.model_dump()
                ctx.state.said.append(f"{tool.name}: exit {out['exit_code']}: "
                                      f"{out['stdout']}{out['stderr']}")
            except uw.ToolCallError as exc:
                ctx.state.said.append(f"{tool.name}: refused {exc.error_type}: {exc}")
        return ctx.done({"said": ctx.state.said})

    store = connect(db_url)
    try:
        engine = uw.Engine(store, flows=[flow], tools=[shell, mounting])
        run_id, _ = engine.start(flow)
        state = asyncio.run(uw.Runner(engine).run_until_complete(run_id))
        history = [r.event for r in engine.journal.history("default", run_id)]
    finally:
        store.close()

    assert state.status == "completed", state.error
    said = state.result["said"]
    before, planted, after = said
    assert before.startswith("mounting: exit"), "the mount works before the attack"
    assert planted.startswith("shell: exit 0"), f"the plant itself runs: {planted}"
    assert after.startswith("mounting: refused SandboxError"), after
    assert all(host.token not in line for line in said), said
    for place in (Path("/tmp"), host.drop, host.vault):
        assert not (place / host.marker).exists(), f"{place} was written"
    assert os.stat(host.vault).st_uid == 0 or os.geteuid() != 0
    failed = [e for e in history if isinstance(e, ev.ToolFailed)]
    assert [e.tool for e in failed] == ["mounting"]
    assert failed[0].error_type == "SandboxError"
    assert re.search("not what it was|may change", failed[0].message), failed[0].message


@pytest.mark.parametrize("options", [
    {"ro_paths": ("cfg",)}, {"rw_paths": ("out",)}, {"ro_paths": ("a/cfg",)},
])
def test_a_tool_mounting_a_path_inside_its_own_workspace_is_refused_when_made(
    host: Host, options: dict[str, tuple[str, ...]],
) -> None:
    """The configuration of the issue: refused before any command could run."""
    absolute = {k: tuple(str(host.ws / p) for p in v) for k, v in options.items()}
    profile = SandboxProfile(backend="bwrap", limits=LIMITS, **absolute)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"inside the workspace|may change"):
        shell_tool(name="shell", profile=profile, workspace=host.ws)
