"""The MCP servers the tests call: the same server over both transports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_ledger import http, ledger, start_http, stdio, stop

import underway.mcp as uw_mcp


@pytest.fixture
def led(tmp_path: Path) -> Path:
    """The directory the server records its effects in."""
    return ledger(tmp_path)


@pytest.fixture(params=["stdio", "http"])
def server(request: pytest.FixtureRequest, led: Path) -> Iterator[uw_mcp.Server]:
    """The test server over stdio in the sandbox, or over Streamable HTTP."""
    if request.param == "stdio":
        yield stdio(led)
        return
    proc, url = start_http(led)
    try:
        yield http(url)
    finally:
        stop(proc)
