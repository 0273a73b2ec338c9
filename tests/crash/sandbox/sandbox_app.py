"""What the sandbox crash test's worker runs: ``underway worker --app sandbox_app:app``
(from this folder). One step calls a shell tool, by name, with the command in the run's
input. The tools share the workspace named by ``UNDERWAY_SANDBOX_WORKSPACE``, so a
command run again after a crash sees what its first attempt left there. They run under
bubblewrap, or in Docker when ``UNDERWAY_SANDBOX_IMAGE`` names an image."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from underway import Flow, RunContext
from underway.flow import Next
from underway.sandbox import Limits, SandboxProfile, shell_tool

WORKSPACE = os.environ.get("UNDERWAY_SANDBOX_WORKSPACE")
IMAGE = os.environ.get("UNDERWAY_SANDBOX_IMAGE")
PROFILE = (SandboxProfile(backend="docker", image=IMAGE, limits=Limits(timeout_s=600)) if IMAGE
           else SandboxProfile(backend="bwrap", limits=Limits(timeout_s=600)))

once = shell_tool(name="shell_once", profile=PROFILE, workspace=WORKSPACE, shell="/bin/bash")
"""Mutating, not idempotent, no reconcile hook: an unknown outcome escalates."""
again = shell_tool(name="shell_again", profile=PROFILE, workspace=WORKSPACE, shell="/bin/bash",
                   idempotent=True)
"""Idempotent: an unknown outcome runs it again."""


class Job(BaseModel):
    """Which tool runs which command."""

    tool: str
    command: str


class Done(BaseModel):
    """Nothing to keep between steps."""


jobs: Flow[Done, Job] = Flow("sandboxed_job", state=Done, input=Job)


@jobs.step
async def run(ctx: RunContext[Done, Job]) -> Next:
    result = await ctx.call(ctx.input.tool, {"command": ctx.input.command})
    return ctx.done(result)


app: list[Any] = [jobs, once, again]
