"""The lean stored form of an event's data: what the envelope holds in place of the model's
dump, and how a reader gets the dump back.

A durable step writes a few events, and each one's bytes stay in the journal for the life
of the run, so what is stored is no more than what cannot be had otherwise:

* a field equal to its default (``None``, ``False``, an empty list, ``attempt`` 1...) is
  left out; validation fills it back in. An event stored with the default spelled out (as
  every event was before) reads the same;
* a latency is stored as ``latency_us``, whole microseconds (the models keep ``latency_ms``,
  rounded to the microsecond by :data:`Millis`, so an event reads back equal to itself). An
  event stored with ``latency_ms`` reads as it always did;
* a call's idempotency key, ``<run id>:<step ordinal>:<step>:<call index>``
  (:func:`underway.effects.idempotency_key`), is stored without the run id it starts with,
  as ``key_in_run``; the reader puts back the run id of the journal it reads (every reader
  of stored events knows which run's journal it reads). A key of another run — a fork's
  copied calls — is stored whole, as ``key``.

Both forms are JSON objects inside the envelope, so the hash chain covers them as it covers
any stored bytes.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from ..errors import IntegrityError
from ._base import JSON

KEY_IN_RUN = "key_in_run"
"""Where a key that starts with its run's id is stored, without it."""

LATENCY_US = "latency_us"
"""Where a latency is stored, in whole microseconds."""


def _to_micros(ms: float) -> float:
    return round(ms * 1000) / 1000


Millis = Annotated[float, AfterValidator(_to_micros)]
"""Milliseconds, kept to the microsecond (what the journal stores of a latency)."""


def lean(data: dict[str, JSON], run_id: str | None) -> dict[str, JSON]:
    """``data`` (an event's dump without its defaults) in its stored form, changed in
    place: latency in microseconds, a key of run ``run_id`` without the run id (``run_id``
    None: keys are kept whole)."""
    ms = data.pop("latency_ms", None)
    if ms is not None:
        data[LATENCY_US] = round(ms * 1000)
    key = data.get("key")
    if run_id is not None and isinstance(key, str) and key.startswith(run_id) \
            and key[len(run_id):len(run_id) + 1] == ":":
        del data["key"]
        data[KEY_IN_RUN] = key[len(run_id) + 1:]
    return data


def full(data: dict[str, JSON], run_id: str | None) -> dict[str, JSON]:
    """Stored ``data`` of an event of run ``run_id`` with what :func:`lean` took out put
    back, changed in place (defaults are left to validation)."""
    if LATENCY_US in data:
        us = data.pop(LATENCY_US)
        if type(us) is not int:
            raise IntegrityError(f"{LATENCY_US} is not a whole number: {us!r}")
        data["latency_ms"] = us / 1000
    if KEY_IN_RUN in data:
        if run_id is None:
            raise IntegrityError(f"an event with {KEY_IN_RUN} is read without its run")
        tail = data.pop(KEY_IN_RUN)
        if not isinstance(tail, str) or "key" in data:
            raise IntegrityError(f"{KEY_IN_RUN} is not a key's tail: {tail!r}")
        data["key"] = f"{run_id}:{tail}"
    return data
