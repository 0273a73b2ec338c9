"""The client's reads of run labels: the labels of a page of runs, as a viewer may see
them (:mod:`underway.labels`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..labels import LabelValue, stored_value
from ..redaction import REDACTED
from ..store.base import StoredLabel

if TYPE_CHECKING:
    from ._transport import Transport


def shown_labels(rows: Sequence[StoredLabel], *, reveal: bool) -> dict[str, LabelValue]:
    """Labels as a viewer sees them: typed; a sensitive one ``[redacted]`` unless
    ``reveal``.

    Args:
        rows: The run's labels as the index holds them.
        reveal: The viewer may see sensitive values.
    """
    return {x.key: REDACTED if x.sensitive and not reveal else stored_value(x.value, x.kind)
            for x in rows}


class Labels:
    """What :class:`~underway.client.Client` reads of runs' labels."""

    _transport: Transport

    def run_labels(self, run_ids: Sequence[str], *, tenant_id: str = "default",
                   reveal: bool = False) -> dict[str, dict[str, LabelValue]]:
        """The labels of these runs, typed, by run id (a run without labels is left
        out); one query on the index. A sensitive label's value reads ``[redacted]``
        unless ``reveal``.

        Args:
            run_ids: The runs.
            tenant_id: The tenant.
            reveal: Show sensitive labels' values.
        """
        return self._transport.run_labels(self._transport.tenant(tenant_id), list(run_ids),
                                          reveal)
