"""The client's consent records and a subject's runs: a data subject's consent per purpose,
granted and withdrawn as new records (never edits), and the runs about a subject."""

from __future__ import annotations

from ..errors import ConfigurationError
from ..store.base import ConsentRecord, RunRecord
from ..subjects import ConsentState, check_purpose, check_reference, check_subject
from ._transport import Transport


class Consents:
    """What :class:`~underway.client.Client` does with consent and subjects."""

    _transport: Transport

    def grant_consent(
        self, subject: str, purpose: str, *, by: str, reference: str | None = None,
        tenant_id: str = "default",
    ) -> ConsentRecord:
        """Record that ``subject`` consents to ``purpose`` from now on.

        Policies that require this consent let the subject's runs act for the purpose from their
        next call on.

        Args:
            subject: The data subject.
            purpose: The purpose.
            by: Who records it.
            reference: The consent artefact, e.g. a consent manager's id.
            tenant_id: The tenant.
        """
        return self._record(tenant_id, subject, purpose, "granted", by, reference)

    def withdraw_consent(
        self, subject: str, purpose: str, *, by: str, reference: str | None = None,
        tenant_id: str = "default",
    ) -> ConsentRecord:
        """Record that ``subject`` withdraws consent to ``purpose`` from now on.

        Some calls of the subject's runs are then denied, whenever the run started. They are the
        calls a policy rule requires this consent for. The denial is journaled with the rule and
        the reason.

        Args:
            subject: The data subject.
            purpose: The purpose.
            by: Who records it.
            reference: The consent artefact, e.g. a consent manager's id.
            tenant_id: The tenant.
        """
        return self._record(tenant_id, subject, purpose, "withdrawn", by, reference)

    def _record(
        self, tenant_id: str, subject: str, purpose: str, state: ConsentState, by: str,
        reference: str | None,
    ) -> ConsentRecord:
        check_subject(subject)
        check_purpose(purpose)
        if reference is not None:
            check_reference(reference, field="reference")
        if not isinstance(by, str) or not by.strip():
            raise ConfigurationError("say who records the consent change (by must not be "
                                     "empty)")
        return self._transport.record_consent(self._transport.tenant(tenant_id), subject,
                                              purpose, state, by, reference)

    def consents(self, subject: str, *, tenant_id: str = "default") -> dict[str, ConsentRecord]:
        """Where the subject's consent stands for each purpose it was ever recorded for:
        the latest record of each, by purpose."""
        return self._transport.consents(self._transport.tenant(tenant_id),
                                        check_subject(subject))

    def consent_history(
        self, subject: str, *, purpose: str | None = None, tenant_id: str = "default"
    ) -> list[ConsentRecord]:
        """Every consent record of the subject, oldest first.

        Args:
            subject: The data subject.
            purpose: Only this purpose's records, when given.
            tenant_id: The tenant.
        """
        if purpose is not None:
            check_purpose(purpose)
        return self._transport.consent_history(self._transport.tenant(tenant_id),
                                               check_subject(subject), purpose)

    def runs_of_subject(
        self, subject: str, *, tenant_id: str = "default", limit: int | None = None
    ) -> list[RunRecord]:
        """The tenant's runs about ``subject``, oldest first.

        Args:
            subject: The data subject.
            tenant_id: The tenant.
            limit: The most runs returned.
        """
        if limit is not None and limit < 0:
            raise ConfigurationError(f"limit must be 0 or more, not {limit}")
        return self._transport.runs_of_subject(self._transport.tenant(tenant_id),
                                               check_subject(subject), limit)
