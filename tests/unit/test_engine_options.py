"""An engine's settings: frozen option objects, and the keywords that build them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from underway import guard as guard_package
from underway.engine import Engine, EngineOptions, GuardOptions
from underway.errors import ConfigurationError
from underway.guard import Guard
from underway.guard.budgets import Budget
from underway.secrets import BoundSecrets, EnvSecrets
from underway.store.memory import MemoryStore
from underway.telemetry import NO_METRICS


def store() -> MemoryStore:
    s = MemoryStore()
    s.migrate()
    return s


def test_keywords_build_the_option_objects() -> None:
    budget = Budget(tool_calls=3)
    engine = Engine(store(), lease_ttl=12.0, retry_budget=None, owner="w-1",
                    environment="prod", budget=budget, shadow=True)
    assert engine.options == EngineOptions(lease_ttl=12.0, retry_budget=None, owner="w-1")
    assert (engine.lease_ttl, engine.retry_budget, engine.owner) == (12.0, None, "w-1")
    assert (engine.guard.environment, engine.guard.budget, engine.guard.shadow) == (
        "prod", budget, True)


def test_option_objects_are_taken_whole() -> None:
    engine = Engine(store(), options=EngineOptions(checkpoint_every=7, group_commit=False),
                    guard_options=GuardOptions(signed_resolutions=True, environment="staging"))
    assert engine.checkpoint_every == 7 and engine.committer is None
    assert engine.guard.signed_resolutions and engine.guard.environment == "staging"
    assert engine.services.checkpoint_every == 7


def test_without_either_the_defaults_hold() -> None:
    engine = Engine(store())
    defaults = EngineOptions()
    assert (engine.lease_ttl, engine.checkpoint_every, engine.retry_budget) == (
        defaults.lease_ttl, defaults.checkpoint_every, defaults.retry_budget)
    assert engine.owner and engine.options.owner == engine.owner  # this process
    assert engine.metrics is NO_METRICS and engine.guard == Guard()


@pytest.mark.parametrize(("given", "keyword"), [
    ({"options": EngineOptions(lease_ttl=10.0)}, {"lease_ttl": 20.0}),
    ({"options": EngineOptions()}, {"retry_budget": None}),
    ({"options": EngineOptions(group_commit=False)}, {"group_commit": True}),
    ({"guard_options": GuardOptions(environment="prod")}, {"environment": "dev"}),
    ({"guard_options": GuardOptions()}, {"shadow": True}),
])
def test_a_keyword_that_disagrees_with_an_option_object_is_refused(
    given: dict[str, Any], keyword: dict[str, Any],
) -> None:
    (field,) = keyword
    with pytest.raises(ConfigurationError, match=f"{field} is given twice"):
        Engine(store(), **given, **keyword)


def test_a_keyword_that_agrees_with_an_option_object_is_accepted() -> None:
    engine = Engine(store(), options=EngineOptions(lease_ttl=10.0), lease_ttl=10.0,
                    guard_options=GuardOptions(environment="prod"), environment="prod")
    assert engine.lease_ttl == 10.0 and engine.guard.environment == "prod"


def test_an_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="lease_tll"):
        Engine(store(), lease_tll=10.0)  # type: ignore[call-arg]


def test_options_are_frozen_and_check_themselves() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        EngineOptions().lease_ttl = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        GuardOptions().shadow = True  # type: ignore[misc]
    with pytest.raises(ConfigurationError, match="lease_ttl"):
        EngineOptions(lease_ttl=0)


def test_guard_options_are_set_on_a_given_guard_and_keep_the_rest() -> None:
    guard = Guard(shadow=True, approval_ttl=60.0)
    engine = Engine(store(), guard=guard, environment="staging")
    assert engine.guard is guard
    assert (guard.shadow, guard.approval_ttl, guard.environment) == (True, 60.0, "staging")


def test_secrets_bound_to_another_environment_are_refused() -> None:
    bound = BoundSecrets(EnvSecrets(environ={}), {}, environment="prod")
    with pytest.raises(ConfigurationError, match="environment 'prod'"):
        Engine(store(), secrets=bound, environment="dev")
    with pytest.raises(ConfigurationError, match="environment 'prod'"):
        Engine(store(), guard_options=GuardOptions(secrets=bound))


def test_a_setting_changed_on_the_engine_reaches_step_execution() -> None:
    engine = Engine(store(), checkpoint_every=50)
    before = engine.services
    engine.retry_budget = 3
    engine.checkpoint_every = 9
    assert engine.options.retry_budget == 3 and engine.options.checkpoint_every == 9
    assert (engine.services.retry_budget, engine.services.checkpoint_every) == (3, 9)
    assert before.retry_budget == 100  # a frozen record: a new one is built
    assert engine.services.guard is engine.guard and engine.services.store is engine.store


def test_the_guard_options_are_the_guards() -> None:
    assert guard_package.GuardOptions is GuardOptions
