"""The model a replay asks instead of the recorded responses (``--model SPEC``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ...effects import Model
from ...errors import ConfigurationError
from ...loading import call_factory, import_object
from ...models import from_env
from ...testing import ScriptedModel

PROVIDERS = ("openai", "anthropic", "openai-compatible")
"""The providers a spec may name (see :func:`underway.models.from_env`)."""

FORMS = ("script:FILE.json (a scripted model: a JSON list of responses, served in order), "
         "openai:<model>, anthropic:<model>, openai-compatible:<model>@<url>, or "
         "module:attribute naming a model object (or a function of no arguments "
         "returning one)")


def model_from_spec(spec: str) -> Model:
    """The model ``spec`` names: one of :data:`FORMS`."""
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ConfigurationError(f"--model {spec!r} is not one of: {FORMS}")
    if kind == "script":
        return _scripted(Path(rest))
    if kind in PROVIDERS:
        return from_env({**os.environ, "UNDERWAY_MODEL": spec}, required=True)
    found = import_object(spec, option="--model", example="mypkg.models:brain")
    if callable(found) and not hasattr(found, "complete"):
        found = call_factory(found, option="--model", spec=spec)
    if not hasattr(found, "complete") or not hasattr(found, "name"):
        raise ConfigurationError(
            f"--model {spec!r} is a {type(found).__name__}, not a model (an object with a "
            "name and an async complete(request))")
    model: Model = found
    return model


def _scripted(path: Path) -> ScriptedModel:
    try:
        responses = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(f"--model script:{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"--model script:{path}: cannot read a JSON list of "
                                 f"responses: {exc}") from None
    if not isinstance(responses, list) or not responses:
        raise ConfigurationError(f"--model script:{path} must hold a non-empty JSON list of "
                                 "model responses")
    return ScriptedModel(responses, name=f"script:{path.name}")
