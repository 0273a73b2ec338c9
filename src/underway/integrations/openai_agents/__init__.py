"""OpenAI Agents SDK agents made durable and guarded by underway.

Wrap an existing ``agents.Agent`` in a :class:`DurableAgent`, register its ``flow`` with an
engine, and start runs with ``{"input": "..."}``; a run's result is the agent's final
output. Every model call is journaled once (``ctx.model``), every tool call goes through
the guard (``ctx.call``), and a tool with ``needs_approval`` waits for a signed decision.
See docs/openai-agents.md.

Needs the SDK: ``pip install 'underway[openai-agents]'``.
"""

from __future__ import annotations

try:
    import agents as _agents  # noqa: F401
    import jsonschema as _jsonschema  # type: ignore[import-untyped]  # noqa: F401
except ImportError as exc:
    from ...errors import ConfigurationError

    raise ConfigurationError(
        "underway.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'underway[openai-agents]'"
    ) from exc

from ._agent import AgentInput, AgentRun, DurableAgent, DurableModel
from ._requests import AgentsModel, decode_request, decode_response, encode_request
from ._tools import NEEDS_APPROVAL, NEEDS_APPROVAL_LABEL, current_call

__all__ = [
    "NEEDS_APPROVAL",
    "NEEDS_APPROVAL_LABEL",
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
