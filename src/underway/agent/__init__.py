"""The agent: a durable plan-act-observe loop around a model, inside the guard.

>>> agent = Agent("collections", model=model, tools=[lookup_invoice, send_reminder])
>>> engine.register(agent.flow)
>>> engine.start(agent.flow, {"goal": "collect invoice INV-7"})
"""

from __future__ import annotations

from .agent import RULES, Agent, AgentInput, AgentState
from .observations import UNTRUSTED, quote, repeated_from

__all__ = ["RULES", "UNTRUSTED", "Agent", "AgentInput", "AgentState", "quote", "repeated_from"]
