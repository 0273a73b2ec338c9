"""The checkout flow written carelessly, for the drill's own tests: its charge swallows a
refused credential and takes any answer for a charge, its quote takes any answer for a
price. ``underway drill --app brokenapp:app --setup brokenapp:scenario``."""

from __future__ import annotations

import os
from typing import Any

from payapp import URL_ENV, checkout, tools
from payapp import scenario as scenario


def app() -> list[Any]:
    """The flow with careless tools, against the service at ``$PAYAPP_URL``."""
    return [checkout, *tools(os.environ[URL_ENV], careful=False)]
