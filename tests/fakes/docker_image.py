"""Which Docker image the sandbox tests run in.

``make test`` starts a Docker engine when it can and builds a local image from Debian's
packages (``scripts/ensure-docker``), naming it in ``UNDERWAY_TEST_DOCKER_IMAGE``: no
registry is assumed reachable. Without it the Docker tests check that the backend refuses
to run (no engine) or skip, saying why (an engine, but no image named).
"""

from __future__ import annotations

import os

import pytest

from underway.sandbox import why_unavailable
from underway.sandbox.escapes import base_profile

IMAGE = os.environ.get("UNDERWAY_TEST_DOCKER_IMAGE") or None
"""The image built by ``scripts/ensure-docker``, when it could build one."""


def engine_reason() -> str | None:
    """None when a Docker engine answers, else why not. With an image named, the engine
    must answer: ``scripts/ensure-docker`` found it answering."""
    reason = why_unavailable("docker", base_profile("docker", IMAGE))
    assert reason is None or IMAGE is None, f"an image is named but no engine: {reason}"
    return reason


def require_image() -> str:
    """The image to run in; skips the test when an engine answers but none was built."""
    if IMAGE is None:
        pytest.skip("a Docker engine answers, but UNDERWAY_TEST_DOCKER_IMAGE names no local "
                    "image to run in (`make test` builds one with scripts/ensure-docker)")
    return IMAGE
