"""Where a stored payload lives: the identity its seal is bound to (:class:`Where`), and
the places of each kind of payload (an event, a checkpoint, a blob...)."""

from __future__ import annotations

import functools
from typing import NamedTuple


class Where(NamedTuple):
    """What a stored payload is and where it lives: the identity its ciphertext is bound
    to (the associated data of the seal), so sealed bytes copied to another row, run,
    seq or tenant fail to open.

    ``kind``: ``event``, ``checkpoint``, ``blob``, ``signal``, ``schedule``, ``knowledge``,
    ``stream_delta``;
    ``ident``: the row's identity within the tenant (an event's run, seq and type; a
    blob's address; a signal's id and name...); ``run_id``: the run the payload belongs
    to, when it belongs to one; ``subject``: the data subject it is about, when known —
    it is then sealed under the subject's key, which erasing the subject destroys. Neither
    is part of the associated data: the key a box names is what opens it."""

    kind: str
    tenant_id: str
    ident: tuple[str | int, ...] = ()
    run_id: str | None = None
    subject: str | None = None

    def what(self) -> str:
        """The payload, in words: ``an event of tenant 'acme'``."""
        article = "an" if self.kind[:1] in "aeiou" else "a"
        return f"{article} {self.kind.replace('_', ' ')} of tenant {self.tenant_id!r}"

    def aad(self) -> bytes:
        """The associated data a seal of this payload is bound to: each part of the
        identity as a netstring (``<length>:<text>,``; an integer as ``#<digits>``), so no
        two identities encode alike."""
        ident = self.ident
        if not ident or type(ident[0]) is not str:
            return _aad_head(self.kind, self.tenant_id, None) + _aad_parts(ident)
        # The head (kind, tenant, first part: a run's id for its events) repeats across a
        # run's payloads: it is made once.
        return _aad_head(self.kind, self.tenant_id, ident[0]) + _aad_parts(ident[1:])


@functools.lru_cache(maxsize=4096)
def _aad_head(kind: str, tenant_id: str, first: str | None) -> bytes:
    text = f"underway/1:{len(kind)}:{kind},{len(tenant_id)}:{tenant_id},"
    return (text if first is None else f"{text}{len(first)}:{first},").encode()


def _aad_parts(parts: tuple[str | int, ...]) -> bytes:
    text = ""
    for p in parts:
        text += f"{len(p)}:{p}," if type(p) is str else f"#{p},"
    return text.encode()


UNSEALED = Where("unsealed", "")
"""What a writer may pass as the identity of a payload when its codec seals nothing (it is
never read then), sparing the making of one per event."""


def event_where(tenant_id: str, run_id: str, seq: int, event_type: str,
                subject: str | None = None) -> Where:
    """Where the event of ``run_id`` at ``seq`` lives: its sealed data is bound to the
    tenant, run, seq and type (``subject``: the run's data subject)."""
    return Where("event", tenant_id, (run_id, seq, event_type), run_id, subject)


def checkpoint_where(tenant_id: str, run_id: str, seq: int,
                     subject: str | None = None) -> Where:
    """Where the run's checkpoint of ``seq`` lives."""
    return Where("checkpoint", tenant_id, (run_id, seq), run_id, subject)


def blob_where(tenant_id: str, key: str, run_id: str | None = None,
               subject: str | None = None) -> Where:
    """Where the tenant's blob at address ``key`` lives (``run_id``: the run writing it;
    ``subject``: the data subject it is about)."""
    return Where("blob", tenant_id, (key,), run_id, subject)


def signal_where(tenant_id: str, signal_id: str, name: str,
                 subject: str | None = None) -> Where:
    """Where a signal's payload lives: bound to its tenant, id and name. Not to its run:
    an outside event's run is chosen in the store's transaction, after its payload is
    sealed (a signed decision names its run inside, and is verified against it).
    ``subject``: the data subject of the run it goes to, when the sender knows it."""
    return Where("signal", tenant_id, (signal_id, name), None, subject)


def schedule_where(tenant_id: str, name: str) -> Where:
    """Where the input of the tenant's schedule ``name`` lives."""
    return Where("schedule", tenant_id, (name,))


def run_error_where(tenant_id: str, run_id: str, subject: str | None = None) -> Where:
    """Where the run row's ``error`` (why it failed, stopped or escalated) lives."""
    return Where("run_error", tenant_id, (run_id,), run_id, subject)


def stream_where(tenant_id: str, run_id: str, key: str, attempt: int,
                 subject: str | None = None) -> Where:
    """Where a delta of the live stream of call ``key`` (its ``attempt``) lives."""
    return Where("stream_delta", tenant_id, (run_id, key, attempt), run_id, subject)


def knowledge_where(tenant_id: str, record_id: str, subject: str | None = None) -> Where:
    """Where the tenant's knowledge record ``record_id`` lives (``subject``: the data
    subject it is about)."""
    return Where("knowledge", tenant_id, (record_id,), None, subject)
