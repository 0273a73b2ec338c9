"""The agent: a durable plan-act-observe loop around a model, inside the guard.

>>> agent = Agent("collections", model=model, tools=[lookup_invoice, send_reminder])
>>> engine.register(agent.flow)
>>> engine.start(agent.flow, {"goal": "collect invoice INV-7"})

:class:`PlanAndExtract` is the dual-model mode: a planner that never reads the data writes
the program, and a quarantined extractor turns untrusted text into typed values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ..guard.taint import UNTRUSTED
from .observations import quote, repeated_from

# The agent itself (with the model types and policies it needs) loads the first time it is
# named (PEP 562): the worker checks whether an app holds agents without loading them for
# every command that imports it.
if TYPE_CHECKING:
    from ._agent import RULES, Agent, AgentInput, AgentState
    from ._plan_extract import PlanAndExtract, PlanExtractState
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "RULES": "._agent", "Agent": "._agent", "AgentInput": "._agent",
        "AgentState": "._agent", "PlanAndExtract": "._plan_extract",
        "PlanExtractState": "._plan_extract",
    }, globals())

__all__ = ["RULES", "UNTRUSTED", "Agent", "AgentInput", "AgentState", "PlanAndExtract",
           "PlanExtractState", "quote", "repeated_from"]
