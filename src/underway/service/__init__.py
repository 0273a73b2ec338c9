"""``underway serve``: the HTTP API over the client — runs, approvals and escalations,
intake webhooks, usage, audits, schedules and queues under ``/v1``; API keys scoped to a
tenant and a role (:mod:`underway.apikeys`); HMAC-signed webhooks
(:mod:`underway.webhooks`); an append-only access log of every read of a run's data.

>>> from underway.service import ServerThread, create_app
>>> app = create_app(uw.Client.connect("sqlite:///runs.db"))  # doctest: +SKIP
>>> with ServerThread(app) as server:  # doctest: +SKIP
...     httpx.get(server.url + "/readyz").json()

Needs the ``service`` extra (FastAPI and uvicorn); ``import underway`` never imports it.
See docs/service.md for every endpoint, the roles and the webhook signature.
"""

from __future__ import annotations

from .._extras import needs_extra

with needs_extra("service", "underway.service"):
    # FastAPI checks for python-multipart only when a form route is declared, and then
    # raises its own error: import it first, so its absence is told like the others'.
    import python_multipart  # noqa: F401

    from ._app import create_app
    from ._auth import ROLES_EXTENSION, RUN_DATA_EXTENSION, Principal
    from ._problems import PROBLEM_TYPE, Problem
    from ._server import ServerThread, serve
    from ._workers import serve_workers

__all__ = [
    "PROBLEM_TYPE",
    "ROLES_EXTENSION",
    "RUN_DATA_EXTENSION",
    "Principal",
    "Problem",
    "ServerThread",
    "create_app",
    "serve",
    "serve_workers",
]
