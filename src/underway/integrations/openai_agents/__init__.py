"""OpenAI Agents SDK agents made durable and guarded by underway.

Wrap an existing ``agents.Agent`` in a :class:`DurableAgent`, register its ``flow`` with an
engine, and start runs with ``{"input": "..."}``; a run's result is the agent's final
output. Every model call is journaled once (``ctx.model``), every tool call goes through
the guard (``ctx.call``), and a tool with ``needs_approval`` waits for a signed decision.
See docs/openai-agents.md.

Needs the SDK: ``pip install 'underway[openai-agents]'``.
"""

from __future__ import annotations

from ..._extras import needs_extra

with needs_extra("openai-agents", "underway.integrations.openai_agents"):
    import agents as _agents  # noqa: F401  (first, so a missing SDK is named before anything)
    import jsonschema as _jsonschema  # noqa: F401

    from ._agent import AgentInput, AgentRun, DurableAgent, DurableModel
    from ._requests import AgentsModel, decode_request, decode_response, encode_request
    from ._tools import current_call

__all__ = [
    "AgentInput",
    "AgentRun",
    "AgentsModel",
    "DurableAgent",
    "DurableModel",
    "current_call",
    "decode_request",
    "decode_response",
    "encode_request",
]
