"""The error an invalid policy raises: it names the file, the rule and the field."""

from __future__ import annotations

from ...errors import ConfigurationError

__all__ = ["PolicyError"]


class PolicyError(ConfigurationError):
    """A policy, a rule or a condition is invalid.

    Args:
        detail: The bare explanation, without the location.
        rule_id: The rule it is in, if any.
        field: The field it is at, a path such as ``args[1].op``.
        source: The file it came from, when it came from one.
    """

    def __init__(
        self,
        detail: str,
        *,
        rule_id: str | None = None,
        field: str | None = None,
        source: str | None = None,
    ) -> None:
        where = [part for part in (
            source,
            f"rule {rule_id!r}" if rule_id is not None else None,
            f"field {field!r}" if field else None,
        ) if part]
        super().__init__(f"policy {', '.join(where)}: {detail}" if where else f"policy: {detail}")
        self.detail = detail
        self.rule_id = rule_id
        self.field = field
        self.source = source

    def located(
        self, *, rule_id: str | None = None, field_prefix: str = "", source: str | None = None
    ) -> PolicyError:
        """The same error placed inside a rule, under a field, or in a file.

        Args:
            rule_id: The rule.
            field_prefix: The path the field is under.
            source: The file.
        """
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        return PolicyError(
            self.detail,
            rule_id=self.rule_id if rule_id is None else rule_id,
            field=field,
            source=self.source if source is None else source,
        )
