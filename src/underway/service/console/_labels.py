"""Run labels on the console's tables: a column per label name a page has, each cell a
link that filters the runs list by it, and the filter typed into the runs page."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from ...labels import LabelValue, label_text, parse_labels
from ...redaction import REDACTED

COLUMNS = 8
"""At most this many label columns on a table: the names most runs of the page have."""


@dataclass(frozen=True, slots=True)
class Cell:
    """One label of one run as a table shows it: its text, and the runs list filtered
    by it (None for a redacted value)."""

    text: str
    href: str | None


def label_columns(labels: Mapping[str, Mapping[str, LabelValue]], *, limit: int = COLUMNS
                  ) -> tuple[list[str], dict[str, dict[str, Cell]]]:
    """The label names a table shows as columns (those most runs of the page have, then
    by name), and each run's cells by name.

    Args:
        labels: Each run's labels as the viewer may see them.
        limit: The most columns.
    """
    seen = Counter(k for found in labels.values() for k in found)
    names = sorted(sorted(seen), key=lambda k: -seen[k])[:limit]
    cells = {run: {k: _cell(k, found[k]) for k in names if k in found}
             for run, found in labels.items()}
    return sorted(names), cells


def _cell(key: str, value: LabelValue) -> Cell:
    text = label_text(value)
    if value == REDACTED:
        return Cell(text, None)
    return Cell(text, "/runs?" + urlencode({"label": f"{key}={text}"}))


def filter_of(given: Iterable[str]) -> dict[str, str]:
    """The labels a runs page is filtered by: ``name=value`` pairs, from repeated ``label``
    parameters or comma-separated in one. Raises
    :class:`~underway.errors.InvalidInput` naming a bad pair.

    Args:
        given: The ``label`` parameters.
    """
    pairs = [p.strip() for g in given for p in g.split(",") if p.strip()]
    return parse_labels(pairs, field="label")
