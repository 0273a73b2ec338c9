"""The client's transport seam: what :class:`~underway.client.Client` asks of the place runs
live. Two implementations: the database (:mod:`underway.client._database`), which reads and
writes the store itself, and HTTP (:mod:`underway.client._http`), which calls ``underway
serve``'s API with an API key. The client's own logic (what a run waits on, signing a
decision, finding a run by a prefix, refusing what a run would refuse) runs above the seam,
once, for both.

Every method takes the tenant first. A run that does not exist is :class:`None` where the
method says so, else :class:`~underway.errors.RunNotFound`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from ..clock import Clock
from ..events import JSON
from ..flow import Flow
from ..journal import Verification
from ..journal.state import Recorded, RunState
from ..labels import LabelValue
from ..store.base import ApproverRecord, ConsentRecord, RunRecord
from ..store.streams import StreamDelta
from ._activity import Activity
from ._forking import Fork
from ._options import StartOptions
from ._pages import RunEvent, RunPage
from ._requests import PendingRequest

if TYPE_CHECKING:
    from ._bulk import BulkItem, BulkResult, RunFilter, _Acting, _Plan


class Transport(Protocol):
    """Where a client's calls go: a database, or ``underway serve`` over HTTP."""

    clock: Clock
    """What stamps the client's decisions (and, on a database, its starts and signals)."""
    where: str
    """Where the runs are, for messages: ``the database``, ``https://host``."""
    remote: bool
    """Calls go to a server that runs the client's own checks before it acts (it is a
    client on its database): a check that would read the run first is left to it."""

    def close(self) -> None:
        """Let go of what the transport opened."""

    def tenant(self, tenant_id: str) -> str:
        """The tenant a call with ``tenant_id`` reaches (over HTTP: the API key's)."""

    def settles_signed_only(self) -> bool:
        """Whether the other side itself refuses unsigned resolutions and resumes (a
        server started with ``signed_resolutions``)."""

    # -- writes -------------------------------------------------------------------------
    def start(self, flow: Flow[Any, Any] | str, input: JSON | BaseModel,
              options: StartOptions) -> tuple[str, bool]:
        """Create the run (or find it by its idempotency key): ``(run_id, created)``."""

    def signal(self, tenant_id: str, run_id: str, name: str, payload: JSON,
               signal_id: str | None, sender: str | None) -> bool:
        """Deliver a signal once per ``signal_id``; False for a duplicate."""

    def control(self, tenant_id: str, run_id: str, action: str, payload: dict[str, JSON],
                signal_id: str | None, by: str) -> bool:
        """Send ``cancel``, ``resolve`` or ``resume`` with its ``payload``."""

    def deliver(self, tenant_id: str, decision: JSON) -> bool:
        """Deliver a checked signed decision to its run; False when it was delivered
        before."""

    def fork(self, tenant_id: str, run_id: str, *, at_seq: int, step: str | None,
             state_patch: JSON, by: str, reason: str) -> Fork:
        """Fork the run at its event ``at_seq``."""

    def record_consent(self, tenant_id: str, subject: str, purpose: str, state: str,
                       by: str, reference: str | None) -> ConsentRecord:
        """Append a grant or a withdrawal of consent."""

    def bulk(self, client: _Acting, plan: _Plan, filter: RunFilter, *, dry_run: bool,
             page_size: int, on_item: Callable[[BulkItem], None] | None) -> BulkResult:
        """Apply ``plan`` to every run ``filter`` selects."""

    # -- reads --------------------------------------------------------------------------
    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row, or None."""

    def list_runs(self, tenant_id: str, *, limit: int, cursor: str | None,
                  id_prefix: str | None, **filters: Any) -> RunPage:
        """A page of runs, newest first (the filters of :meth:`Client.list_runs`)."""

    def events(self, tenant_id: str, run_id: str, after: int,
               limit: int | None) -> list[RunEvent]:
        """The run's events after ``after``."""

    def state(self, tenant_id: str, run_id: str) -> RunState:
        """The run's folded state."""

    def states_at(self, tenant_id: str, run_id: str, seq: int
                  ) -> tuple[RunState, Recorded, RunState]:
        """The state before the event at ``seq``, the event, and the state after it."""

    def history(self, tenant_id: str, run_id: str) -> list[Recorded]:
        """Every event of the run, decoded."""

    def verify(self, tenant_id: str, run_id: str) -> Verification:
        """Check the run's hash chain."""

    def pending_requests(self, tenant_id: str, limit: int) -> list[PendingRequest]:
        """What runs wait for a person to decide, soonest expiry first."""

    def pending_request(self, tenant_id: str, run_id: str) -> PendingRequest | None:
        """What the run waits for a person to decide."""

    def activity(self, tenant_id: str, *, since: float, days: int,
                 hourly: bool) -> Activity:
        """What the tenant's runs did in the window."""

    def run_labels(self, tenant_id: str, run_ids: Sequence[str],
                   reveal: bool) -> dict[str, dict[str, LabelValue]]:
        """The labels of these runs, by run id."""

    def consents(self, tenant_id: str, subject: str) -> dict[str, ConsentRecord]:
        """The latest consent record of the subject for each purpose."""

    def consent_history(self, tenant_id: str, subject: str,
                        purpose: str | None) -> list[ConsentRecord]:
        """Every consent record of the subject, oldest first."""

    def runs_of_subject(self, tenant_id: str, subject: str,
                        limit: int | None) -> list[RunRecord]:
        """The runs about the subject, oldest first."""

    def approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """The registered approver, or None."""

    # -- live streams -------------------------------------------------------------------
    def read_stream(self, tenant_id: str, run_id: str, after: int,
                    limit: int) -> list[StreamDelta]:
        """At most ``limit`` of the run's live deltas after offset ``after``."""

    def stream_page(self, tenant_id: str, run_id: str, after: int,
                    limit: int) -> tuple[list[StreamDelta], bool]:
        """The deltas after ``after``, and whether the run has finished with none left."""

    def stream(self, tenant_id: str, run_id: str, after: int, follow: bool,
               limit: int) -> AsyncIterator[StreamDelta]:
        """The deltas after ``after`` as they are written, each once; ends once the run has
        finished and none is left (without ``follow``: once none is left now)."""


def is_http(url: str) -> bool:
    """Whether ``url`` names a server (``http://`` or ``https://``), not a database."""
    return url.lower().startswith(("http://", "https://"))
