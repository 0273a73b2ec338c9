"""The support monitor assembled: tools, agent, sweep, routes, policy, and the engine.

The brain is :func:`support.brain.decide` (deterministic rules) unless ``UNDERWAY_MODEL``
names a real model (see :func:`underway.models.from_env`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from underway import Engine, Flow, Store
from underway.effects import Model
from underway.errors import ConfigurationError
from underway.guard.budgets import Budget
from underway.guard.policy import Policy, load_policy
from underway.knowledge import KnowledgeBase, open_knowledge
from underway.models import from_env
from underway.scheduling.intake import Routes
from underway.testing import RuleModel

from .agent import SupportAgent
from .brain import decide
from .relay import routes
from .sweep import SweepInput, SweepState, make_sweep
from .tools import DeskTools, make_tools

POLICY_FILE = Path(__file__).with_name("policy.toml")
AGENT = "support_agent"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """How the monitor runs. ``environment`` is what the policy's rules match on;
    ``reply_timeout_s`` is how long a ticket waits for the customer's missing details."""

    desk: str
    environment: str = "prod"
    reply_timeout_s: float = 2 * 86400.0
    lease_ttl: float = 30.0

    def __post_init__(self) -> None:
        if not self.desk.startswith(("http://", "https://")):
            raise ConfigurationError(f"desk must be an http(s) URL, not {self.desk!r}")
        if not self.reply_timeout_s > 0:
            raise ConfigurationError(
                f"reply_timeout_s must be positive seconds, not {self.reply_timeout_s!r}")


@dataclass(frozen=True)
class Monitor:
    """Everything a process of the monitor needs, built once."""

    settings: Settings
    policy: Policy
    knowledge: KnowledgeBase
    tools: DeskTools
    agent: SupportAgent
    sweep: Flow[SweepState, SweepInput]
    routes: Routes

    @property
    def flows(self) -> list[Flow[Any, Any]]:
        """The flows a worker runs."""
        return [self.agent.flow, self.sweep]

    def engine(self, store: Store) -> Engine:
        """An engine for these flows on ``store``, in the settings' environment."""
        return Engine(store, flows=self.flows, tools=self.tools.all,
                      environment=self.settings.environment, lease_ttl=self.settings.lease_ttl)


def default_model() -> Model:
    """The model named by ``UNDERWAY_MODEL``, else the deterministic rules."""
    return from_env() or RuleModel(decide, name="support-rules")


def build(settings: Settings, store: Store, *, model: Model | None = None) -> Monitor:
    """The monitor over ``store`` (migrated; its knowledge base holds the help center)."""
    policy = load_policy(POLICY_FILE)
    knowledge = open_knowledge(store)
    tools = make_tools(settings.desk, knowledge)
    agent = SupportAgent(
        AGENT, model=model or default_model(), tools=tools, policy=policy,
        reply_timeout_s=settings.reply_timeout_s,
        budget=Budget(model_calls=30, messages=3),
    )
    sweep = make_sweep(tools, policy)
    return Monitor(settings, policy, knowledge, tools, agent, sweep, routes(agent.flow))
