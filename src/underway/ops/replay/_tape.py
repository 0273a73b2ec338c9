"""The recorded answers a replay serves: a run's journaled tool results, model responses,
values, signals and decisions, each served once, matched by call order and tool and
arguments."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ...events import JSON, canonical_json
from ._trace import Trace, TracedCall, TracedModel, Waited


@dataclass(slots=True)
class Tape:
    """One original run's :class:`Trace`, with what the replay has used of it."""

    trace: Trace
    used: set[int] = field(default_factory=set)
    """Indexes of the trace's calls a replay call was answered with."""
    models_used: int = 0
    values_used: dict[str, int] = field(default_factory=dict)
    waits_used: set[int] = field(default_factory=set)
    waits_taken: dict[tuple[int, str], Waited | None] = field(default_factory=dict)
    answers_used: int = 0

    def match(self, tool: str, args_hash: str,
              key: str | None = None) -> tuple[int, TracedCall] | None:
        """The call not yet used with the same tool and arguments: the one with idempotency
        ``key`` (a replay on the original's path makes its calls under the original's
        keys), else the first (the calls are in the order they were journaled, so calls
        repeated with equal arguments are served in order).

        Args:
            tool: The tool's name.
            args_hash: The hash the journal binds the call's arguments to.
            key: The replay's idempotency key of the call; None matches by order alone.
        """
        same = self._first(lambda c: c.key == key and c.tool == tool
                           and c.args_hash == args_hash) if key is not None else None
        return same or self._first(lambda c: c.tool == tool and c.args_hash == args_hash)

    def same_tool(self, tool: str) -> tuple[int, TracedCall] | None:
        """The first call of ``tool`` not yet used whose tool ran (it has a result or a
        failure), whatever its arguments: what ``--on-divergence stub`` answers with."""
        return self._first(lambda c: c.tool == tool and c.has_result)

    def _first(self, ok: Callable[[TracedCall], bool]) -> tuple[int, TracedCall] | None:
        for i, c in enumerate(self.trace.calls):
            if i not in self.used and ok(c):
                return i, c
        return None

    @property
    def calls_left(self) -> int:
        """Calls of the original the replay has not used."""
        return len(self.trace.calls) - len(self.used)

    def next_model(self) -> TracedModel | None:
        """The next recorded model response, in order (None: none left)."""
        found = self.peek_model()
        if found is not None:
            self.models_used += 1
        return found

    def peek_model(self) -> TracedModel | None:
        """The recorded model response :meth:`next_model` gives next, left in place."""
        if self.models_used >= len(self.trace.models):
            return None
        return self.trace.models[self.models_used]

    def value(self, kind: str, fresh: JSON) -> JSON:
        """The next recorded value of ``kind`` (``now``, ``uuid``, ``random``), else
        ``fresh``."""
        seen = self.values_used.get(kind, 0)
        recorded = [v for k, v in self.trace.values if k == kind]
        self.values_used[kind] = seen + 1
        return recorded[seen] if seen < len(recorded) else fresh

    def wait(self, at: int, name: str) -> Waited | None:
        """How the original's wait for ``name`` that matches the replay's wait ended: the
        original's waits for ``name`` in journal order, one per replay wait. None: the
        original made no such wait.

        Args:
            at: The replay run's count of completed steps: it names the wait.
            name: The signal waited for.
        """
        key = (at, name)
        if key not in self.waits_taken:
            found = next((i for i, w in enumerate(self.trace.waits)
                          if i not in self.waits_used and w.signal == name), None)
            if found is not None:
                self.waits_used.add(found)
            self.waits_taken[key] = None if found is None else self.trace.waits[found]
        return self.waits_taken[key]

    def answer(self) -> tuple[JSON, str] | None:
        """The next recorded answer to a question and who gave it (None: none left)."""
        if self.answers_used >= len(self.trace.answers):
            return None
        self.answers_used += 1
        return self.trace.answers[self.answers_used - 1]


def same_request(a: JSON, b: JSON) -> bool:
    """True when two model requests are the same JSON."""
    try:
        return canonical_json(a) == canonical_json(b)
    except (TypeError, ValueError):
        return False
