"""The console of ``underway serve``: server-rendered pages (Jinja2, a little plain
JavaScript, no build step) for operators and approvers, under ``/`` of the same app as the
API. Sign-in exchanges an API key for a session cookie (:mod:`._session`); every page
sees only its key's tenant and does only what its key's role may; reads of a run's data
are written to the access log like the API's.

- ``/runs``: the runs, filtered and searched, with counts by status; resume, cancel or
  resolve every run of the filter, after a dry run;
- ``/runs/{id}``: a run's timeline, its state at any event, live while it moves;
- ``/approvals``: the inbox, with decisions signed in the browser;
- ``/charts``: the tenant's metrics per day, charts from the runs table and the journal
  (``/metrics`` is the app's Prometheus endpoint).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from . import _approvals, _base, _bulk, _bulk_decide, _metrics, _run, _run_actions, _runs
from ._security import CONSOLE_CSP, SecurityHeaders
from ._session import Sessions

__all__ = ["CONSOLE_CSP", "install_console"]

STATIC = Path(__file__).parent / "static"


def install_console(app: FastAPI, *, session_secret: bytes | None = None) -> None:
    """Add the console's pages, static files, sign-in and security headers to ``app``
    (made by :func:`underway.service.create_app`, whose state holds the client).
    ``session_secret`` MACs the session cookies: give the same one to every server behind
    one address so a session holds on each (default: random, so a restart signs every
    browser out)."""
    app.state.console = Sessions(app.state.underway.store, session_secret)
    _base.install_handlers(app)
    for module in (_base, _runs, _bulk, _run, _run_actions, _bulk_decide, _approvals,
                   _metrics):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(SecurityHeaders)
