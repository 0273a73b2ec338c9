"""The agent's own actions, as the model calls them: finish, ask a person, revise the plan,
wait, wait for a signal, and the planning turn's ``set_plan``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..events import JSON
from ..models.types import ToolSpec


class _Finish(BaseModel):
    result: Any = Field(description="the outcome: what was done, or why it cannot be done")


class _Ask(BaseModel):
    question: str
    context: Any = None


class _Plan(BaseModel):
    steps: list[str] = Field(min_length=1)
    reason: str = ""


class _NamedPlan(_Plan):
    tools: list[str] = Field(default_factory=list, description=(
        "the tools the plan will use to change something or send something out"))


PLAN_NAMES_TOOLS = "underway.agent.plan-names-tools"
"""The change (:meth:`~underway.flow.RunContext.version`) after which the plan names the
tools it will write with. A run recorded before it replays with the requests it made."""


class _Wait(BaseModel):
    seconds: float = Field(gt=0)
    reason: str = ""


class _WaitFor(BaseModel):
    signal: str
    timeout_seconds: float = Field(gt=0)
    reason: str = ""


_Control = _Finish | _Ask | _Plan | _Wait | _WaitFor
"""The agent's own actions, as the model calls them."""

_CONTROL: dict[str, tuple[type[_Control], str]] = {
    "finish": (_Finish, "Finish the run with its outcome."),
    "ask_human": (_Ask, "Ask a person a question and wait for the answer."),
    "revise_plan": (_Plan, "Replace the plan with new steps, saying why."),
    "wait": (_Wait, "Pause for this many seconds (durably), then continue."),
}


_OWN_ACTIONS = frozenset({*_CONTROL, "set_plan", "wait_for_signal"})



def _plan_spec(model: type[_Plan], names: list[str]) -> JSON:
    return ToolSpec(name="set_plan", description="Set the plan: the steps toward the goal.",
                    parameters=_plan_schema(model, names),
                    ).model_dump(mode="json", exclude_defaults=True)


def _plan_schema(model: type[_Plan], names: list[str]) -> dict[str, Any]:
    """``model``'s schema; for a plan that names tools, ``tools`` chooses among ``names``
    (an agent with no tool to write with is asked for none)."""
    schema = (model if names else _Plan).model_json_schema()
    if "tools" in schema.get("properties", {}):
        schema["properties"]["tools"]["items"] = {"type": "string", "enum": names}
    return schema


_PLAN_SPEC: JSON = _plan_spec(_Plan, [])
