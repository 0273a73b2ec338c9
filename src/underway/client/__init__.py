"""The client: start, signal, cancel, resume, resolve, decide and answer runs, and read them —
everything done to runs from outside a worker, with no flow code needed.

>>> import underway as uw
>>> with uw.Client.connect("sqlite:///runs.db") as client:  # doctest: +SKIP
...     run_id, _ = client.start("invoice_followup", {"invoice": "INV-7"},
...                              idempotency_key="INV-7")
...     client.signal(run_id, "paid", {"amount": 120})
...     client.list_runs(status="waiting").runs

The same client reaches runs through ``underway serve``: give it the server's URL and an API
key, and every method works as on a database (``docs/service.md``).

>>> client = uw.Client("https://runs.example.com", api_key="uwk_...")  # doctest: +SKIP

The executor (:class:`~underway.Engine`, driven by a :class:`~underway.Worker`) activates
runs and executes their steps; its own ``start``, ``signal``, ``cancel``... are this
client's, checked against the flows the engine has.
"""

from __future__ import annotations

from ..journal import Verification
from ..journal.state import Recorded, RunState
from ..store.base import ConsentRecord, RunRecord
from ._activity import Activity, ActivityDay, RoleApprovals
from ._bulk import ACTIONS, BulkAction, BulkItem, BulkResult, KeySigner, RunFilter, Signer
from ._client import Client
from ._deciding import waiting_words
from ._forking import Fork
from ._options import StartKeywords, StartOptions
from ._pages import ChildRun, RunEvent, RunPage
from ._requests import PendingRequest, redact_request

__all__ = [
    "ACTIONS",
    "Activity",
    "ActivityDay",
    "BulkAction",
    "BulkItem",
    "BulkResult",
    "ChildRun",
    "Client",
    "ConsentRecord",
    "Fork",
    "KeySigner",
    "PendingRequest",
    "Recorded",
    "RoleApprovals",
    "RunEvent",
    "RunFilter",
    "RunPage",
    "RunRecord",
    "RunState",
    "Signer",
    "StartKeywords",
    "StartOptions",
    "Verification",
    "redact_request",
    "waiting_words",
]
