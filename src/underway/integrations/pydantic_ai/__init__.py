"""pydantic-ai agents, unmodified, run durably and guarded by underway.

>>> from underway.integrations.pydantic_ai import DurableAgent
>>> durable = DurableAgent(agent, name="support")
>>> engine = uw.Engine(store, flows=[durable.flow])

Every model request is an underway model call (journaled, quoted, counted by budgets,
never asked twice) and every tool call passes the one door (allow-list, schema, policy,
budgets, approvals, taint). See ``docs/pydantic-ai.md``.
"""

from __future__ import annotations

from ..._extras import needs_extra

with needs_extra("pydantic-ai", "underway.integrations.pydantic_ai"):
    import pydantic_ai  # noqa: F401  (first, so a missing package is named before anything)

    from ._agent import AgentInput, AgentState, DurableAgent, usage_budget
    from ._model import JournaledModel, PydanticAIModel
    from ._toolset import GuardedToolset, call_info

__all__ = [
    "AgentInput",
    "AgentState",
    "DurableAgent",
    "GuardedToolset",
    "JournaledModel",
    "PydanticAIModel",
    "call_info",
    "usage_budget",
]
