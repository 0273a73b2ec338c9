"""What ``--app`` names in the replay and deploy-check command tests: the examples' code as
their recorded journals ran it (``example_apps:collections`` and so on, from this folder),
bound to made-up services under ``$EXAMPLE_APP_DATA`` (a replay never runs a tool)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))

from recorded_journals import app


def _app(example: str) -> list[Any]:
    data = Path(os.environ.get("EXAMPLE_APP_DATA") or tempfile.mkdtemp()) / example
    flows, tools = app(example, data)
    return [*flows, *tools]


def invoice_followup() -> list[Any]:
    """The invoice follow-up flow and its tools."""
    return _app("invoice_followup")


def collections() -> list[Any]:
    """The collections agent."""
    return _app("collections")


def support() -> list[Any]:
    """The support agent and the SLA sweep."""
    return _app("support")
