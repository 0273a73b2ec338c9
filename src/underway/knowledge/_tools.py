"""Tools that let an agent read (and, when allowed, write) the knowledge base.

What :func:`recall_tool` returns is data to quote, not instructions to follow: each item
carries its ``source`` so the agent can say where it read it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..clock import Clock, SystemClock
from ..effects import CallInfo, Tool, tool
from ..errors import ConfigurationError
from ._record import SENSITIVITIES, KnowledgeRecord, Sensitivity
from .base import KnowledgeBase


class RecallArgs(BaseModel):
    """The arguments of the recall tool: words to look for, and how many hits at most."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(max_length=4000)
    limit: int = Field(default=5, ge=1, le=50)


class RememberArgs(BaseModel):
    """The arguments of the remember tool: the text to keep, and any JSON metadata."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=20_000)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("text is blank; there is nothing to remember")
        return text


def recall_tool(
    knowledge: KnowledgeBase,
    *,
    clock: Clock | None = None,
    name: str = "recall",
    max_sensitivity: Sensitivity = "internal",
    timeout: float = 30.0,
    description: str = "Search long-term memory (notes, articles, policies) by keywords; "
    "each result names its source.",
    trusted_output: bool = False,
) -> Tool:
    """A read-only tool searching ``knowledge`` for the calling run's tenant.

    Arguments ``{"query": str, "limit": int = 5}``. Result: a list of ``{id, text, source,
    created_at, sensitivity, score}``, best first. The caller's roles come from its
    ``CallInfo``. When it carries none, only records open to every role show.

    Args:
        knowledge: The knowledge base.
        clock: Decides what has expired.
        name: The tool's name.
        max_sensitivity: Records above it are never shown: what a tool returns reaches the
            model and the run's journal.
        timeout: Seconds a call may take.
        description: What a model reads about it.
        trusted_output: Its results do not taint an agent's context. Declare it only for a
            knowledge base whose every record you vouch for (articles your staff wrote).
            Never declare it for one that agents write to with :func:`remember_tool`. That
            would carry one run's untrusted content into the next.
    """
    _check_sensitivity(max_sensitivity)
    now = (clock or SystemClock()).now

    def recall(args: RecallArgs, info: CallInfo) -> list[dict[str, Any]]:
        hits = knowledge.search(
            info.tenant_id, args.query, roles=tuple(getattr(info, "roles", ())), now=now(),
            limit=args.limit, max_sensitivity=max_sensitivity,
        )
        return [
            {
                "id": h.record.id, "text": h.record.text, "source": h.record.source,
                "created_at": h.record.created_at, "sensitivity": h.record.sensitivity,
                "score": h.score,
            }
            for h in hits
        ]

    return tool(recall, name=name, mutating=False, timeout=timeout, description=description,
                trusted_output=trusted_output)


def remember_tool(
    knowledge: KnowledgeBase,
    *,
    clock: Clock | None = None,
    name: str = "remember",
    roles: Collection[str] = (),
    sensitivity: Sensitivity = "internal",
    retention: float | None = None,
    timeout: float = 30.0,
    description: str = "Remember a fact for later runs (stored with this run as its source).",
) -> Tool:
    """A tool that stores what an agent wants remembered, for its run's tenant.

    Arguments ``{"text": str, "metadata": {...}}``; result ``{id, source, expires_at}``.
    The record's id is the call's idempotency key. So a call retried after a crash stores one
    record, the first. Its ``source`` is ``run:<run_id>``. ``metadata["written_by"]`` names
    the run, step and (when known) principal. A run about a data subject stores it about that
    subject, sealed under the subject's key. So erasing the subject deletes it. Who may read
    it, how sensitive it is and how long it is kept are set here. The application sets them,
    never the model.

    Args:
        knowledge: The knowledge base.
        clock: Decides when a record expires.
        name: The tool's name.
        roles: Who may read the records.
        sensitivity: How sensitive they are.
        retention: Seconds they are kept; None keeps them until deleted.
        timeout: Seconds a call may take.
        description: What a model reads about it.
    """
    _check_sensitivity(sensitivity)
    if isinstance(roles, str) or not all(isinstance(r, str) and r for r in roles):
        raise ConfigurationError(f"roles must be a collection of role names, not {roles!r}")
    if retention is not None and not retention > 0:
        raise ConfigurationError(f"retention must be positive seconds or None, not {retention!r}")
    now = (clock or SystemClock()).now
    readers = tuple(roles)

    def remember(args: RememberArgs, info: CallInfo) -> dict[str, Any]:
        record = knowledge.get(info.tenant_id, info.key)
        if record is None:
            t = now()
            record = KnowledgeRecord(
                id=info.key, tenant_id=info.tenant_id, text=args.text,
                source=f"run:{info.run_id}", created_at=t,
                expires_at=None if retention is None else t + retention, roles=readers,
                sensitivity=sensitivity,
                metadata={**args.metadata, "written_by": {
                    "run_id": info.run_id, "step": info.step,
                    "principal": getattr(info, "principal", None),
                }},
            )
            knowledge.put(record)
        return {"id": record.id, "source": record.source, "expires_at": record.expires_at}

    return tool(remember, name=name, mutating=True, idempotent=True, timeout=timeout,
                description=description)


def _check_sensitivity(label: str) -> None:
    if label not in SENSITIVITIES:
        raise ConfigurationError(
            f"unknown sensitivity {label!r}; use one of {', '.join(SENSITIVITIES)}"
        )
