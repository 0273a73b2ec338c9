"""The flows and tools an executor runs, by name."""

from __future__ import annotations

from typing import Any

from ..effects import Tool
from ..errors import ConfigurationError
from ..flow import Flow
from ..redaction import Hidden


class Registry:
    """Flows and tools by name; a flow's declared tools are registered with it."""

    def __init__(self) -> None:
        self.flows: dict[str, Flow[Any, Any]] = {}
        self.tools: dict[str, Tool] = {}
        self.hidden = Hidden()
        """Every field the tools registered or called so far hide (a model's prompt and
        answer may carry any of them)."""

    def register(self, flow: Flow[Any, Any]) -> None:
        """Make ``flow`` runnable (and register the tools it declares)."""
        if flow.start_step is None:
            raise ConfigurationError(f"flow {flow.name!r} has no steps")
        for old, to in flow.aliases.items():
            if not flow.has_step(old):
                raise ConfigurationError(
                    f"flow {flow.name!r}: alias {old!r} leads to {to!r}, which is not a step "
                    f"of the flow; steps: {sorted(flow.steps)}")
        self.flows[flow.name] = flow
        for t in flow.declared_tools:
            known = self.tools.setdefault(t.name, t)
            self.hidden |= t.hidden
            if known is not t:
                raise ConfigurationError(
                    f"flow {flow.name!r} declares a tool {t.name!r} but another tool of that "
                    "name is already registered"
                )

    def tool(self, ref: Tool | str) -> Tool:
        """Resolve a tool by object or registered name."""
        if isinstance(ref, Tool):
            if ref.hidden and ref.name not in self.tools:
                self.hidden |= ref.hidden
            return ref
        try:
            return self.tools[ref]
        except KeyError:
            raise ConfigurationError(
                f"no tool named {ref!r} is registered; known tools: {sorted(self.tools)}"
            ) from None

    def flow(self, name: str) -> Flow[Any, Any]:
        """The flow registered as ``name``."""
        try:
            return self.flows[name]
        except KeyError:
            raise ConfigurationError(
                f"flow {name!r} is not registered with this engine; known: {sorted(self.flows)}"
            ) from None
