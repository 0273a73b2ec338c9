"""Redaction: what a viewer may not see of a run's data, decided in one place.

A tool names the fields of its arguments and results that are **sensitive**
(``Tool(sensitive=("pan", "phone"))``); the fields its argument or result model types
``SecretStr``, ``SecretBytes`` or ``Secret`` are **secrets**
(:attr:`underway.Tool.hidden`). The engine journals both lists with each event that
carries the tool's arguments or results (``sensitive_fields`` and ``secret_fields`` of
``ToolStarted``, ``ToolSucceeded``, ``ToolShadowed``, ``SchemaValidationFailed``,
``ApprovalRequested``, ``ToolSelected``; a ``ModelResponded`` names every field the
engine's tools hide, since a model's prompt and answer may carry any of them), so a reader
without the flow's code knows them. The journal itself is never changed: every surface
that shows a run's data — ``underway runs show|events``, ``underway approvals
ls|show``, the API and its live tail, the console, approval notices, log lines — passes it
through a :class:`Redactor` first:

1. a value under a hidden field's name, at any depth, becomes ``"[redacted]"`` (the field
   stays, so the shape does);
2. a value a hidden field held, learned from the events, is hidden wherever else it
   appears: as a whole value, or inside text (an error, a model's prompt, a state patch);
3. a JSON-patch operation whose path passes through a hidden field has its value hidden;
4. a string that holds a JSON object or array (tool arguments as a model writes them) is
   redacted inside.

Sensitive fields are shown to a viewer allowed to see them (``reveal=True``); secrets
never are. Values shorter than :data:`MIN_LEARNED` characters are not hidden by rule 2
(hiding every ``"no"`` or ``42`` would hide the run), only where rules 1 and 3 find them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .events import JSON, Event

__all__ = [
    "LOGGERS",
    "MIN_LEARNED",
    "REDACTED",
    "Hidden",
    "RedactingFilter",
    "Redactor",
    "RunRedactors",
    "redacting_logs",
    "scrub",
]

REDACTED = "[redacted]"
"""What a hidden value is shown as."""
MIN_LEARNED = 4
"""The shortest value (as text) rule 2 hides wherever it appears."""

_SCALARS = (str, int, float)
_JSON_START = re.compile(r"\s*[\[{]")
_JSON_TEXT_LIMIT = 1_000_000
T = TypeVar("T")
LOGGERS = ("underway.worker", "underway.runner", "underway.approvals", "underway.models",
           "underway.sandbox", "underway.journal", "underway.schedules")
"""The loggers a worker writes to (:func:`redacting_logs` filters them)."""


@dataclass(frozen=True, slots=True)
class Hidden:
    """The names of the fields a tool hides: ``sensitive`` ones (shown to a viewer who may
    reveal them) and ``secret`` ones (shown to nobody)."""

    sensitive: frozenset[str] = frozenset()
    secret: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.sensitive or self.secret)

    def __or__(self, other: Hidden) -> Hidden:
        return Hidden(self.sensitive | other.sensitive, self.secret | other.secret)

    def declared(self) -> dict[str, Any]:
        """The fields an event declares them with (``sensitive_fields``,
        ``secret_fields``): sorted lists, or None when empty."""
        return {"sensitive_fields": sorted(self.sensitive) or None,
                "secret_fields": sorted(self.secret) or None}

    @classmethod
    def of(cls, event: object) -> Hidden:
        """What ``event`` (or a record with the same two fields) declares."""
        sensitive = getattr(event, "sensitive_fields", None) or ()
        secret = getattr(event, "secret_fields", None) or ()
        return cls(frozenset(sensitive), frozenset(secret))


class Redactor:
    """Hides from one viewer what the declarations it has learned say is hidden.

    Secrets are always hidden; sensitive fields unless ``reveal``. Learn from every event of
    a run before showing any (:meth:`learn`). Or learn from a tool's :class:`Hidden` and a
    call's values (:meth:`learn_values`). Then pass what is shown through :meth:`event`,
    :meth:`json`, :meth:`text` or :meth:`fields`. Safe to share between threads.

    Args:
        reveal: Show sensitive fields to this viewer.
        hidden: Field names to learn at once.
        remember: The most hidden values remembered.
    """

    def __init__(self, *, reveal: bool = False, hidden: Hidden | None = None,
                 remember: int = 10_000) -> None:
        self.reveal = reveal
        self._names: set[str] = set()
        self._values: OrderedDict[str, None] = OrderedDict()
        self._remember = remember
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()
        if hidden is not None:
            self.learn_names(hidden)

    @property
    def hides(self) -> bool:
        """Whether anything is hidden from this viewer yet."""
        return bool(self._names or self._values)

    @property
    def names(self) -> frozenset[str]:
        """The field names hidden from this viewer."""
        return frozenset(self._names)

    def copy(self) -> Redactor:
        """A redactor that has learned what this one has, and learns on its own."""
        twin = Redactor(reveal=self.reveal, remember=self._remember)
        with self._lock:
            twin._names = set(self._names)
            twin._values = OrderedDict(self._values)
        return twin

    # -- learning -----------------------------------------------------------------------
    def learn_names(self, hidden: Hidden) -> None:
        """Hide these fields from now on (the sensitive ones unless ``reveal``)."""
        names = hidden.secret if self.reveal else hidden.secret | hidden.sensitive
        if not names <= self._names:
            with self._lock:
                self._names |= names

    def learn(self, events: Event | Iterable[Event]) -> Redactor:
        """Learn the fields the events declare hidden and the values those fields hold in
        them; returns this redactor."""
        for event in [events] if isinstance(events, Event) else events:
            hidden = Hidden.of(event)
            if hidden:
                self.learn_names(hidden)
                self.learn_values(event.model_dump(mode="json"), hidden)
        return self

    def learn_values(self, value: JSON, hidden: Hidden | None = None) -> None:
        """Learn the values that fields named hidden hold in ``value``, at any depth
        (``hidden``: names to look under besides those learned so far)."""
        names = set(self._names)
        if hidden is not None:
            names |= hidden.secret if self.reveal else hidden.secret | hidden.sensitive
        found: list[str] = []
        _collect(value, frozenset(names), found, False)
        fresh = [v for v in found if len(v) >= MIN_LEARNED and v != REDACTED]
        if not fresh:
            return
        with self._lock:
            for v in fresh:
                self._values[v] = None
                self._values.move_to_end(v)
            while len(self._values) > self._remember:
                self._values.popitem(last=False)
            self._pattern = None

    # -- hiding -------------------------------------------------------------------------
    def text(self, text: str) -> str:
        """``text`` with every learned value replaced (and JSON inside it redacted)."""
        if not self.hides:
            return text
        if _JSON_START.match(text) and len(text) <= _JSON_TEXT_LIMIT:
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict | list):
                hidden = self._json(parsed)
                if hidden != parsed:
                    return json.dumps(hidden, ensure_ascii=False)
        pattern = self._values_pattern()
        return pattern.sub(REDACTED, text) if pattern is not None else text

    def json(self, value: JSON) -> JSON:
        """``value`` with hidden fields' values, learned values and hidden patch values
        replaced by :data:`REDACTED`; its shape is kept."""
        return self._json(value) if self.hides else value

    def event(self, event: T) -> T:
        """A copy of ``event`` (any :class:`~underway.events.Event`) with its fields
        redacted; the event itself when nothing in it is hidden. Numbers and flags at the
        top of an event (seq, index, tokens, costs, times) are its own facts, left as
        they are."""
        if not self.hides or not isinstance(event, Event):
            return event
        changed: dict[str, Any] = {}
        for name, value in event.model_dump(mode="json").items():
            if name in ("type", "sensitive_fields", "secret_fields") or value is None \
                    or isinstance(value, bool | int | float):
                continue
            hidden = self._json(value)
            if hidden != value:
                changed[name] = _as_field(getattr(event, name), hidden)
        return event.model_copy(update=changed) if changed else event

    def fields(self, obj: T, *names: str) -> T:
        """A copy of the dataclass ``obj`` with the fields ``names`` redacted."""
        if not self.hides:
            return obj
        copy: T = dataclasses.replace(  # type: ignore[type-var]
            obj, **{n: self._json(getattr(obj, n)) for n in names})
        return copy

    def _json(self, value: JSON) -> JSON:
        if isinstance(value, Mapping):
            return self._mapping(value)
        if isinstance(value, list):
            return [self._json(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, _SCALARS) and not isinstance(value, bool) \
                and str(value) in self._values:
            return REDACTED
        return value

    def _mapping(self, value: Mapping[str, JSON]) -> JSON:
        out: dict[str, JSON] = {}
        hide_value = _hidden_path(value, self._names) or _hidden_loc(value, self._names)
        for k, v in value.items():
            if (k in self._names and v is not None) or (hide_value and k in ("value", "input")):
                out[k] = REDACTED
            else:
                out[k] = self._json(v)
        return out

    def _values_pattern(self) -> re.Pattern[str] | None:
        pattern = self._pattern
        if pattern is None and self._values:
            with self._lock:
                ordered = sorted(self._values, key=len, reverse=True)
                pattern = self._pattern = re.compile("|".join(map(re.escape, ordered)))
        return pattern


class RunRedactors:
    """What was learned of the last ``size`` runs shown, so that showing a run again reads
    only the events journaled since (a long run's page stays quick): :meth:`redactor`
    gives a viewer's redactor of one run, learned up to its newest event."""

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._learned: OrderedDict[tuple[Hashable, bool], tuple[Redactor, int]] = OrderedDict()
        self._lock = threading.Lock()

    def redactor(self, run: Hashable, reveal: bool,
                 events_after: Callable[[int], Sequence[tuple[int, Event]]]) -> Redactor:
        """A redactor for ``run`` that learned every event of it, from the first on.

        Args:
            run: Any key naming the run.
            reveal: Show sensitive fields.
            events_after: Returns the (seq, event) pairs after a ``seq``.

        Returns:
            A copy, the caller's to teach more.
        """
        key = (run, reveal)
        with self._lock:
            found = self._learned.get(key)
        red, seq = found if found is not None else (Redactor(reveal=reveal), 0)
        fresh = events_after(seq)
        if fresh:
            red.learn(e for _, e in fresh)
            seq = max(seq, fresh[-1][0])
        with self._lock:
            self._learned[key] = (red, seq)
            self._learned.move_to_end(key)
            while len(self._learned) > self._size:
                self._learned.popitem(last=False)
        return red.copy()


def _as_field(current: object, hidden: JSON) -> object:
    """A redacted value in the type of the field it replaces: a nested model (a run's
    lineage, whose labels may be hidden) stays a model, so the event still dumps."""
    if not isinstance(current, BaseModel) or not isinstance(hidden, dict):
        return hidden
    try:
        return type(current).model_validate(hidden)
    except ValidationError:
        return type(current).model_construct(**hidden)


def scrub(text: str, hidden: Hidden, value: JSON) -> str:
    """``text`` without the values the fields ``hidden`` names hold in ``value``.

    It is for an error's text, journaled once for every viewer. Whoever may see those values
    sees them where they were given.

    Args:
        text: The text.
        hidden: The hidden fields.
        value: Where their values are.
    """
    if not hidden or not text:
        return text
    redactor = Redactor(hidden=hidden)
    redactor.learn_values(value)
    return redactor.text(text)


def schema_failure(where: str, errors: Sequence[Mapping[str, JSON]], hidden: Hidden) -> str:
    """The text of a failed schema check of a call's ``where`` (``args`` or ``result``):
    each error's place and what is wrong, never the input it quotes. A value a hidden field
    holds is taken out too, as a validator's own message may quote one. The worker raises
    it, and the fold of the journal gives the same text when the call is read back."""
    parts = []
    for err in errors:
        loc = err.get("loc")
        place = ".".join(str(p) for p in loc) if isinstance(loc, list) and loc else ""
        parts.append(f"{place}: {err.get('msg')}" if place else str(err.get("msg")))
    verb = "does" if where == "result" else "do"
    return scrub(f"{where} {verb} not match the schema: {'; '.join(parts)}", hidden,
                 list(errors))


def _collect(value: JSON, names: frozenset[str], out: list[str], inside: bool) -> None:
    """Append to ``out`` the scalar values (as text) under ``names`` in ``value``
    (``inside``: ``value`` itself is under one)."""
    if isinstance(value, Mapping):
        take = inside or _hidden_loc(value, names) or _hidden_path(value, names)
        for k, v in value.items():
            under = inside or k in names or (take and k in ("value", "input"))
            _collect(v, names, out, under)
    elif isinstance(value, list):
        for v in value:
            _collect(v, names, out, inside)
    elif inside and isinstance(value, _SCALARS) and not isinstance(value, bool):
        out.append(str(value))


def _hidden_loc(value: Mapping[str, JSON], names: set[str] | frozenset[str]) -> bool:
    """A validation error (``loc``, ``input``) whose ``input`` is at or under a hidden
    field. A ``missing`` error's input is the object that lacks the field, not the field's
    value: it is hidden only when that object is itself under a hidden field."""
    loc = value.get("loc")
    if "input" not in value or not isinstance(loc, list):
        return False
    within = loc[:-1] if value.get("type") == "missing" else loc
    return any(isinstance(p, str) and p in names for p in within)


def _hidden_path(value: Mapping[str, JSON], names: set[str] | frozenset[str]) -> bool:
    """A JSON-patch operation (``op``, ``path``, ``value``) through a hidden field."""
    path = value.get("path")
    if "op" not in value or "value" not in value or not isinstance(path, str):
        return False
    return any(p.replace("~1", "/").replace("~0", "~") in names for p in path.split("/"))


class RedactingFilter(logging.Filter):
    """A logging filter that passes every record's message (and the text of its
    exception) through a :class:`Redactor`: add it to a logger or handler so that no
    value a run hides reaches the logs."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's text with hidden values replaced; always keep it."""
        if not self.redactor.hides:
            return True
        message = record.getMessage()
        hidden = self.redactor.text(message)
        if hidden != message:
            record.msg, record.args = hidden, None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = self.redactor.text(
                logging.Formatter().formatException(record.exc_info))
        return True


@contextmanager
def redacting_logs(redactor: Redactor, loggers: Iterable[str] = LOGGERS) -> Iterator[None]:
    """While inside, every record of ``loggers`` passes through a
    :class:`RedactingFilter` of ``redactor``."""
    found = [logging.getLogger(name) for name in loggers]
    hiding = RedactingFilter(redactor)
    for logger in found:
        logger.addFilter(hiding)
    try:
        yield
    finally:
        for logger in found:
            logger.removeFilter(hiding)
