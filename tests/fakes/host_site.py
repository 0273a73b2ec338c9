"""A web site on the host, at a free local port, for the tests of what a sandbox may reach:
it answers every GET with ``hello from the host`` and records the paths asked for."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any

from fakes.served import Served

BODY = b"hello from the host"
"""What every GET is answered with."""


class HostSite(Served):
    """Serves on 127.0.0.1 in a thread while entered; ``paths`` lists the paths asked for."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(BODY)))
                self.end_headers()
                self.wfile.write(BODY)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)
