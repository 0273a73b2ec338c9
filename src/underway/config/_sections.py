"""The sections of ``underway.toml``, as pydantic models: unknown keys and values of the
wrong type are refused (strict), and relative paths are resolved against the file's
directory while it is read (see :mod:`underway.config._loading`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    model_validator,
)

from ..errors import ConfigurationError
from ..privacy.retention import DEFAULT_EVERY, parse_period

BASE = "base"
"""The validation context's key for the directory relative paths start from."""


def _path(value: object, info: ValidationInfo) -> Path:
    if not isinstance(value, str) or not value:
        raise ValueError("must be a path (a non-empty string)")
    path = Path(value).expanduser()
    base = (info.context or {}).get(BASE)
    return path if path.is_absolute() or base is None else Path(base) / path


def _existing_file(path: Path) -> Path:
    if not path.is_file():
        raise ValueError(f"no such file: {str(path)!r}")
    return path


def _http_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    return url


def _env_name(name: str) -> str:
    if not name or "=" in name or "\0" in name:
        raise ValueError(f"{name!r} is not the name of an environment variable")
    return name


def _period(value: object) -> float:
    """A retention period or interval: ``"90d"``, ``"12h"``, ``"7y"``, ``"never"``."""
    if not isinstance(value, str):
        raise ValueError(f"must be a period such as \"90d\" or \"never\" (a string), "
                         f"not {value!r}")
    try:
        return parse_period(value)
    except ConfigurationError as exc:
        raise ValueError(str(exc)) from None


def _address(address: str) -> str:
    if "@" not in address.strip("@") or any(c.isspace() for c in address):
        raise ValueError(f"{address!r} is not an e-mail address")
    return address


AnyPath = Annotated[Path, BeforeValidator(_path)]
"""A path; relative to the config file's directory."""
ExistingFile = Annotated[Path, BeforeValidator(_path), AfterValidator(_existing_file)]
"""A file that must exist; relative to the config file's directory."""
HttpUrl = Annotated[str, AfterValidator(_http_url)]
EnvName = Annotated[str, AfterValidator(_env_name)]
Address = Annotated[str, AfterValidator(_address)]
Name = Annotated[str, Field(min_length=1)]
Period = Annotated[float, BeforeValidator(_period)]
"""A period written as a number and a unit (``90d``), or ``never``."""
Limit = Annotated[int, Field(ge=0)]
Amount = Annotated[float, Field(ge=0)]


class Section(BaseModel):
    """A table of the file: no unknown keys, no silently converted values."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class WorkerSection(Section):
    """``[worker]``: what ``underway worker`` runs and how (its options override these)."""

    app: Name | None = None
    """The flows and tools, as ``module:attribute`` (``--app``)."""
    queues: list[Name] | None = Field(default=None, min_length=1)
    """The queues served (``--queue``); every queue when absent."""
    concurrency: int = Field(default=10, ge=1)
    lease_ttl: float = Field(default=30.0, ge=0.1)
    poll: float = Field(default=1.0, ge=0.01)
    grace: float = Field(default=30.0, ge=0)
    eager_start: bool = True
    """Runs the worker starts itself (schedules' ticks, child runs) are leased to it in
    their start's transaction while it has a free slot (``--no-eager-start``: never)."""
    environment: Name | None = None
    """What policies see as the environment (``dev`` when absent)."""
    secrets_env_prefix: str | None = None
    """Tools' secrets come from environment variables with this prefix."""
    group_commit: bool = True
    """Commit the steps of the runs in flight together, one transaction for all that are
    waiting (``--no-group-commit`` turns it off)."""
    verbose: bool = False


Count = Annotated[int, Field(ge=1)]


class SandboxSection(Section):
    """``[sandbox]``: what all sandboxed calls of one worker may hold at once
    (:class:`~underway.sandbox.WorkerLimits`; an absent key keeps its default). A call
    that does not fit is refused before it runs (docs/sandbox.md)."""

    calls: Count | None = None
    """Sandboxed calls running at once."""
    processes: Count | None = None
    """Processes and threads of all calls together."""
    egress_connections: Count | None = None
    """Egress proxy connections of all calls together."""
    output_bytes: Count | None = None
    """Command output kept in memory, all calls together."""
    resolver_threads: Count | None = None
    """Threads that resolve the names of egress destinations."""

    def limits(self) -> dict[str, int]:
        """The keys given, as keyword arguments of
        :class:`~underway.sandbox.WorkerLimits` (``underway worker`` makes it; the config
        never loads the sandbox, which ``underway serve`` does without)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


Environments = Annotated[list[Name], Field(min_length=1)] | Name


class SecretsSection(Section):
    """``[secrets]``: which environment each of the tools' secrets belongs to. A worker
    in another environment (``[worker] environment``, ``--environment``) is refused the
    secret, and the refusal is journaled before the tool runs (docs/configuration.md)."""

    environments: dict[str, Environments] = {}
    """Secret name to the environment (or list of environments) that may read it."""
    default: Environments | None = None
    """The environment(s) of secrets not listed; absent: any environment may read them."""


class AnchoringSection(Section):
    """``[anchoring]``: the worker signs the journals' heads every ``every`` seconds with
    ``key`` and appends them to ``log`` (see docs/audit.md)."""

    every: float = Field(gt=0)
    key: ExistingFile
    log: AnyPath


class PeriodsSection(Section):
    """How long finished runs' payloads are kept, per final status (absent: said by a less
    specific rule; ``"never"``: kept)."""

    completed: Period | None = None
    failed: Period | None = None
    cancelled: Period | None = None
    forget_after: Period | None = None
    """How long after it ended a purged run is forgotten (its skeleton deleted)."""


class TenantRetentionSection(PeriodsSection):
    """``[retention.tenants.<tenant>]``: a tenant's periods, and its flows'
    (``[retention.tenants.<tenant>.flows.<flow>]``)."""

    flows: dict[Name, PeriodsSection] = Field(default_factory=dict)


class RetentionSection(TenantRetentionSection):
    """``[retention]``: the periods for every tenant, per flow (``[retention.flows.<flow>]``)
    and per tenant (``[retention.tenants.<tenant>]``), the most specific first; ``every``:
    how often ``underway worker`` sweeps (see docs/data-protection.md)."""

    tenants: dict[Name, TenantRetentionSection] = Field(default_factory=dict)
    every: Period = DEFAULT_EVERY
RevealRole = Literal["viewer", "operator", "approver", "admin"]


class ServeSection(Section):
    """``[serve]``: what ``underway serve`` listens on and serves (its options override
    these)."""

    host: Name = "127.0.0.1"
    port: int = Field(default=8420, ge=0, le=65535)
    app: Name | None = None
    """The flows starts are checked against, as ``module:attribute``."""
    routes: Name | None = None
    """Intake routes for ``POST /v1/intake/{source}``, as ``module:attribute``."""
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    session_secret_env: EnvName | None = None
    """The environment variable holding the console's session secret (at least 32
    characters): give every server behind one address the same, so a browser's session
    holds on each and across restarts (unset: a random secret per process)."""
    metrics_token_env: EnvName | None = None
    """The environment variable holding the token a scrape of ``/metrics`` must bear
    (``Authorization: Bearer <token>``; unset: ``/metrics`` is open, like ``/healthz``)."""
    reveal_roles: list[RevealRole] = Field(default_factory=lambda: list[RevealRole](["admin"]))
    """The roles whose keys may ask to see the fields tools declare sensitive
    (``reveal=true`` on reads; secrets are never shown). An approver may always see the
    exact arguments of a request it decides. ``[]``: nobody."""
    max_body_bytes: int = Field(default=1024 * 1024, ge=1)
    """The largest request body the server reads (default 1 MiB); a larger one is
    answered 413 before it is parsed."""


class WebhookSection(Section):
    """``[notifier.webhook]``: POST each notice as JSON to ``url``, signed with the secret
    held by the environment variable ``secret_env`` (``X-Underway-Signature``)."""

    url: HttpUrl
    secret_env: EnvName | None = None
    timeout: float = Field(default=10.0, gt=0)


class SmtpSection(Section):
    """``[notifier.smtp]``: e-mail each notice to the addresses listed for its required
    role in ``recipients`` (``"*"``: every notice); the password is read from the
    environment variable ``password_env``."""

    host: Name
    port: int = Field(default=25, ge=1, le=65535)
    sender: Address
    recipients: dict[Name, Annotated[list[Address], Field(min_length=1)]] = Field(
        min_length=1)
    starttls: bool = False
    username: Name | None = None
    password_env: EnvName | None = None
    timeout: float = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _login(self) -> SmtpSection:
        if (self.username is None) != (self.password_env is None):
            raise ValueError("give username and password_env together to log in, or neither")
        return self


class NotifierSection(Section):
    """``[notifier]``: who is told that a run waits for a person; both may be given."""

    webhook: WebhookSection | None = None
    smtp: SmtpSection | None = None


class PolicySection(Section):
    """``[policy]``: the policy file (TOML or YAML) for every flow that has none of its
    own."""

    file: ExistingFile


class BudgetSection(Section):
    """One budget (:class:`~underway.guard.budgets.Budget`): limits per UTC day of all of a
    tenant's runs; an absent limit is no limit."""

    tokens: Limit | None = None
    cost_usd: Amount | None = None
    model_calls: Limit | None = None
    tool_calls: Limit | None = None
    wall_clock_s: Amount | None = None
    messages: Limit | None = None
    money: dict[Annotated[str, Field(min_length=3, max_length=3)], Amount] | None = None
    """Amounts moved per currency; a currency not named may not be moved (``inf``: no
    limit)."""
    on_exceed: Literal["escalate", "fail"] = "escalate"


class BudgetsSection(Section):
    """``[budgets]``: ``default`` holds every tenant not named in ``tenants``; a named
    tenant has exactly its own budget."""

    default: BudgetSection | None = None
    tenants: dict[Name, BudgetSection] = Field(default_factory=dict)
    usage_ttl: float = Field(default=5.0, ge=0)
    """Seconds a worker reuses a tenant's usage before reading the journals again: the
    most a tenant can overspend by is what it spends in that time (0: read at every
    check)."""


class TelemetrySection(Section):
    """``[telemetry]``: Prometheus metrics and OpenTelemetry traces of the worker."""

    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Serve the worker's metrics at ``http://ADDR:PORT/metrics``."""
    metrics_addr: Name = "0.0.0.0"
    """The address the worker's metrics listen on (``127.0.0.1``: this machine only)."""
    metrics_token_env: EnvName | None = None
    """The environment variable holding the token a scrape of the worker's metrics must
    send (``Authorization: Bearer <token>``); unset, they are open."""
    traces: bool = False
    """Send spans of runs, steps, tool and model calls, derived from the journal."""
    exporter: Literal["otlp", "console"] | None = None
    """Where spans go: ``otlp`` (to a collector), ``console`` (stderr); absent: ``otlp``,
    to where the ``OTEL_EXPORTER_OTLP_*`` variables say."""
    endpoint: HttpUrl | None = None
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    service_name: Name = "underway"

    @model_validator(mode="after")
    def _otlp_only(self) -> TelemetrySection:
        if self.endpoint is not None and self.exporter != "otlp":
            raise ValueError("endpoint is for exporter = \"otlp\"")
        return self


class ApprovalsSection(Section):
    """``[approvals]``: how people's decisions are accepted."""

    signed_resolutions: bool = False
    """Settle escalations only with a resolution signed by an approver."""


class EncryptionSection(Section):
    """``[encryption]``: seal every stored payload under per-tenant data keys, wrapped by a
    key-encryption key from ``provider`` (see docs/data-protection.md): ``keyring`` (a
    local keyring file, ``keyring``: its path), ``env`` (the KEK in the environment
    variable ``env``; earlier ones in ``previous_env`` while data keys are re-wrapped) or
    ``python`` (``factory``: ``module:attribute`` of a function of no arguments returning
    a key provider, e.g. around a cloud KMS). ``subjects``: the directory of data subjects'
    secrets (the vault an erasure destroys them in; default for ``keyring``: beside the
    keyring file, ``<keyring>.subjects``; ``env`` has none unless given)."""

    provider: Literal["keyring", "env", "python"]
    keyring: AnyPath | None = None
    subjects: AnyPath | None = None
    env: EnvName = "UNDERWAY_KEK"
    previous_env: list[EnvName] = Field(default_factory=list)
    factory: Name | None = None
    refresh: float = Field(default=5.0, ge=0)
    """Seconds a process goes on sealing with a data key it knows before it looks for a
    newer one (a rotation made by another process)."""

    @model_validator(mode="after")
    def _needs(self) -> EncryptionSection:
        if self.provider == "keyring" and self.keyring is None:
            raise ValueError('provider = "keyring" needs keyring = "<path of the keyring file>"')
        if self.provider == "python" and self.factory is None:
            raise ValueError('provider = "python" needs factory = "module:function"')
        return self


def _database(value: Any, info: ValidationInfo) -> Any:
    """A relative SQLite path is relative to the file's directory, like every path in it."""
    base = (info.context or {}).get(BASE)
    if not isinstance(value, str) or base is None or not value.startswith("sqlite:///"):
        return value
    path = value.removeprefix("sqlite:///")
    if path.startswith("/") or path.startswith(":memory:"):
        return value
    return "sqlite:///" + os.path.join(os.path.abspath(base), path)


DatabaseUrl = Annotated[Name, BeforeValidator(_database)]
"""A database URL; a relative SQLite path is relative to the config file's directory."""


class BlobsSection(Section):
    """``[blobs]``: how large values are stored (see docs/architecture.md#large-values)."""

    max_value_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    """The most bytes one value's canonical JSON may have (a tool's result, a value in the
    state): a larger one fails its call (or its step) with ``ValueTooLarge``, and
    nothing of it is stored. Default 256 MiB."""
    chunk_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Strings longer than this are stored in chunks of about this many bytes, written and
    read a chunk at a time. Default 1 MiB."""


class ResidencySection(Section):
    """``[residency]``: one database per region (``regions``: region name to database
    URL), the region of each tenant (``tenants``: tenant id to region name) and the
    ``default`` region of tenants not listed (absent: they are refused). Every row of a
    tenant — runs, journals, signals, intake, schedules, approvers, API keys, webhook
    secrets, the access log, consent — is stored in its region's database only (see
    docs/data-protection.md)."""

    regions: dict[Name, DatabaseUrl] = Field(min_length=1)
    tenants: dict[Name, Name] = Field(default_factory=dict)
    default: Name | None = None

    @model_validator(mode="after")
    def _known_regions(self) -> ResidencySection:
        known = ", ".join(sorted(self.regions))
        for tenant, region in self.tenants.items():
            if region not in self.regions:
                raise ValueError(f"tenant {tenant!r} is in region {region!r}, which is not "
                                 f"one of the regions ({known})")
        if self.default is not None and self.default not in self.regions:
            raise ValueError(f"the default region {self.default!r} is not one of the "
                             f"regions ({known})")
        urls = list(self.regions.values())
        for url in urls:
            if urls.count(url) > 1:
                raise ValueError(f"two regions share the database {url!r}; each region "
                                 "needs a database of its own")
        return self


class Sections(Section):
    """Every table of the file (see :class:`~underway.config.Config`)."""

    database: DatabaseUrl | None = None
    worker: WorkerSection = WorkerSection()
    sandbox: SandboxSection | None = None
    serve: ServeSection = ServeSection()
    notifier: NotifierSection = NotifierSection()
    policy: PolicySection | None = None
    budgets: BudgetsSection | None = None
    telemetry: TelemetrySection = TelemetrySection()
    approvals: ApprovalsSection = ApprovalsSection()
    secrets: SecretsSection = SecretsSection()
    anchoring: AnchoringSection | None = None
    retention: RetentionSection | None = None
    residency: ResidencySection | None = None
    encryption: EncryptionSection | None = None
    blobs: BlobsSection = BlobsSection()

    @model_validator(mode="after")
    def _one_place_for_data(self) -> Sections:
        if self.database is not None and self.residency is not None:
            raise ValueError("give either database or [residency], not both: with residency "
                             "every database is a region's ([residency.regions])")
        return self
