"""One config file for ``underway worker`` and ``underway serve``: ``underway.toml``.

:func:`load_config` reads and checks it into a :class:`Config` — the database, the
``[worker]`` and ``[serve]`` options, the ``[sandbox]`` limits of a worker's sandboxed
calls, the ``[notifier]`` (a webhook and/or SMTP) that tells approvers a run waits for
them, the ``[policy]`` file, per-tenant ``[budgets]``, ``[telemetry]`` (Prometheus
metrics, OpenTelemetry traces and their exporter), ``[approvals]`` (signed
resolutions), ``[anchoring]``, ``[residency]`` (a database per region, the region of
each tenant), ``[retention]`` (how long finished runs' payloads are kept) and
``[encryption]`` (encryption at rest) and ``[blobs]`` (the size limit of one value, and
the chunks large values are stored in). An unknown key, a value of the wrong type, a
missing file or an unset secret variable is a :class:`ConfigError` naming the file, the
key (``notifier.webhook.url``) and the problem. The ``make_*`` methods of
:class:`Config` build the objects an :class:`~underway.Engine` takes, so a program that
builds its own worker can read the same file. docs/configuration.md has every key.
"""

from __future__ import annotations

from ._config import DEFAULT_FILE, Config, ConfigError, find_config, load_config
from ._sections import (
    AnchoringSection,
    ApprovalsSection,
    BlobsSection,
    BudgetSection,
    BudgetsSection,
    EncryptionSection,
    NotifierSection,
    PeriodsSection,
    PolicySection,
    ResidencySection,
    RetentionSection,
    SandboxSection,
    SecretsSection,
    ServeSection,
    SmtpSection,
    TelemetrySection,
    TenantRetentionSection,
    WebhookSection,
    WorkerSection,
)

__all__ = [
    "DEFAULT_FILE",
    "AnchoringSection",
    "ApprovalsSection",
    "BlobsSection",
    "BudgetSection",
    "BudgetsSection",
    "Config",
    "ConfigError",
    "EncryptionSection",
    "NotifierSection",
    "PeriodsSection",
    "PolicySection",
    "ResidencySection",
    "RetentionSection",
    "SandboxSection",
    "SecretsSection",
    "ServeSection",
    "SmtpSection",
    "TelemetrySection",
    "TenantRetentionSection",
    "WebhookSection",
    "WorkerSection",
    "find_config",
    "load_config",
]
