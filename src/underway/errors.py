"""The exceptions underway raises.

Every error derives from :class:`UnderwayError`. This is the whole tree. A class defined
elsewhere names its module in brackets, under ``underway``::

    UnderwayError
    ├── ConfigurationError      bad URL, unknown flow or step, invalid input
    │   ├── AmbiguousRunId      a run id prefix names several runs (lists them)
    │   ├── MissingExtra        an optional package is not installed: names the extra;
    │   │                       also a ModuleNotFoundError
    │   ├── ConfigError         underway.toml cannot be used [config]
    │   ├── CronError           a cron expression or time zone is malformed [cron]
    │   ├── IntakeError         an event or routing table intake cannot use [intake]
    │   │   └── MalformedMessage  a message intake cannot act on [intake_sources]
    │   ├── InvalidInput        outside input a run cannot hold (NUL, NaN, too deep, too
    │   │                       long): names the field [inputs]
    │   ├── PolicyError         a policy file or rule is malformed [policy]
    │   ├── ResidencyError      a tenant has no region where residency is configured
    │   ├── SecretMissing       a tool needs a secret its provider lacks [secrets]
    │   └── SandboxUnavailable  no isolation backend can run a sandboxed tool; also a
    │                           SandboxError [sandbox]
    ├── SandboxError            a sandboxed command could not be set up [sandbox]
    │   └── SandboxLimitReached  the worker's sandbox limits are full [sandbox]
    ├── ModelError              a model provider refused or failed [models]
    ├── RouteBudgetExceeded     a model route's per-run budget is spent [models]
    ├── RunNotFound             no run with that id in that tenant
    ├── ServiceError            ``underway serve`` cannot be reached, or refuses the API
    │                           key (401, 403), or fails (5xx)
    ├── SignedResolutionRequired  an unsigned resolve or resume where only signed ones
    │                           settle runs (``[approvals] signed_resolutions``)
    ├── NonDeterminismError     a re-run issued a different call sequence
    ├── ToolCallError           a tool call failed; raised inside the step that made it
    ├── CredentialsRejected     a service refused a tool's credentials [secrets]
    ├── HTTPError               a service answered 4xx or 5xx [http]
    ├── ResponseInvalid         a 2xx answer is not what the tool expects [http]
    │   └── MutationAnswerInvalid  same, for a mutating request; also an
    │                           OutcomeUnknown [http]
    ├── OutcomeUnknown          a tool lost track of an effect it started: it may or may
    │                           not have happened
    ├── EgressDenied            a tool's request went to a host it did not declare
    ├── SecretRefused           a tool's secret belongs to another environment
    ├── ToolError               an MCP server answered a call with an error [mcp]
    ├── ToolVanished            an MCP server no longer lists the tool called [mcp]
    ├── KeyUnavailable          no key here opens an encrypted payload; readers show
    │   │                       ``[encrypted]``
    │   └── SubjectErased       the payload's data subject was erased
    ├── ValueTooLarge           a value is over the size limit for one stored value;
    │                           also a ValueError
    ├── IntegrityError          stored data fails its hash or schema checks
    │   └── ResultInvalid       a journaled tool result no longer fits its model
    ├── MalformedRecord         a line of the anchor log is not a record; also a
    │                           ValueError [audit.anchors]
    ├── Unevaluable             a policy condition cannot be evaluated [policy.conditions]
    ├── ErasureRefused          an erasure refused before it destroyed anything [erasure]
    ├── Unpurgeable             a run the retention sweep leaves as it is [retention]
    │   └── AlreadyPurged       its journal holds tombstones already [erasure]
    ├── ReplayedFailure         a replayed call fails as the original did [replay]
    │   └── NoRecordedResult    a stubbed call the original never made [replay]
    ├── DrillError              a drill could not be carried out [drills]
    └── StoreError              the database refused an operation
        ├── ConflictError       another writer appended first (expected sequence moved)
        ├── FencedError         the writer no longer holds the run's lease
        └── MigrationError      the schema cannot be brought to the expected version

Signals derive from ``BaseException``, so user code that catches ``Exception`` cannot
swallow them::

    BaseException
    ├── RunCancelledSignal      the run was cancelled; raised inside its step
    ├── HookFailed              a hook raised, answered wrongly or ran too long [hooks]
    └── Diverged                stops a replay where it left the original [replay]
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass


class UnderwayError(Exception):
    """Root of every error underway raises."""


class ConfigurationError(UnderwayError):
    """The runtime was given something it cannot use: say what and how to fix it."""


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """One bad field of a value from outside.

    ``loc`` is where it is (keys and indexes from the value's root), ``msg`` what is wrong,
    ``type`` the kind of error (pydantic's: ``missing``, ``int_parsing``...)."""

    loc: tuple[str | int, ...]
    msg: str
    type: str


class InvalidInput(ConfigurationError):
    """A value from outside cannot be stored or used.

    Raised before anything is stored. The service answers it with a 4xx problem naming the
    field, and listing each bad one (``errors``).

    Args:
        field: Where the value is (e.g. ``body.input.items.0``).
        problem: What is wrong with it.
        status: The HTTP status the service answers with.
        errors: Each bad field (default: ``field`` with ``problem``).
        message: The error's text (default: ``"{field}: {problem}"``).
    """

    def __init__(self, field: str, problem: str, *, status: int = 422,
                 errors: Sequence[FieldProblem] = (), message: str | None = None) -> None:
        super().__init__(message or f"{field}: {problem}")
        self.field = field
        self.problem = problem
        self.status = status
        self.errors = tuple(errors) or (
            FieldProblem(tuple(field.split(".")), problem, "invalid"),)


class MissingExtra(ConfigurationError, ModuleNotFoundError):
    """An optional package is not installed. The message names the extra that installs
    it: ``OpenAIChat needs the openai extra (openai is missing): pip install
    'underway[openai]'``. It is also a ``ModuleNotFoundError``; its ``name`` is the missing
    module, when one is known.

    Args:
        what: What needs the package (``underway serve``, ``OpenAIChat``).
        extra: The extra that installs it.
        module: The module that is missing.
        reason: Why the import failed, when no module is missing (a package found, but
            not its native library).
    """

    def __init__(self, what: str, *, extra: str, module: str | None = None,
                 reason: str | None = None) -> None:
        why = f"{module} is missing" if module else reason
        super().__init__(f"{what} needs the {extra} extra{f' ({why})' if why else ''}: "
                         f"pip install 'underway[{extra}]'", name=module)
        self.what = what
        self.extra = extra
        self.reason = reason

    def about(self, what: str) -> MissingExtra:
        """The same error, for ``what`` (a command that needs the package)."""
        return MissingExtra(what, extra=self.extra, module=self.name, reason=self.reason)


class SignedResolutionRequired(UnderwayError):
    """This deployment settles escalations and dead runs only with signed resolutions
    (``[approvals] signed_resolutions``), and an unsigned resolve or resume was asked for.
    Nothing was sent: the workers would refuse it. The message says how to sign one.

    Args:
        run_id: The run (empty for a bulk operation: it names no one run).
        action: What was refused, e.g. ``resume``.
        how: How to sign one instead (default: for the one run).
    """

    def __init__(self, run_id: str, action: str, *, how: str | None = None) -> None:
        where = f"run {run_id}: " if run_id else ""
        how = how or (f"Sign one with `underway approvals resolve {run_id}`, in the "
                      "console's approvals inbox, or POST it to "
                      f"/v1/approvals/{run_id}/decision")
        super().__init__(
            f"{where}an unsigned {action} is refused here: runs are settled only by "
            "resolutions signed by an approver ([approvals] signed_resolutions), and "
            f"nothing was sent. {how}"
        )
        self.run_id = run_id
        self.action = action


class AmbiguousRunId(ConfigurationError):
    """A run id prefix matches more than one run of the tenant: give more of the id.

    Args:
        tenant_id: The tenant searched.
        prefix: The prefix given.
        matches: The run ids it matches.
    """

    def __init__(self, tenant_id: str, prefix: str, matches: list[str]) -> None:
        shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
        super().__init__(
            f"run id prefix {prefix!r} matches {len(matches)} runs in tenant {tenant_id!r} "
            f"({shown}); give more of the id"
        )
        self.tenant_id = tenant_id
        self.prefix = prefix
        self.matches = matches


class ResidencyError(ConfigurationError):
    """Residency is configured and the tenant has no region (it is not listed and there is
    no default region): nothing of the tenant is read or written anywhere."""

    def __init__(self, tenant_id: str, regions: list[str]) -> None:
        super().__init__(
            f"tenant {tenant_id!r} has no region: residency is configured (regions "
            f"{', '.join(regions)}) and the tenant is not listed under [residency.tenants], "
            "and there is no default region; add it to underway.toml (nothing was stored)"
        )
        self.tenant_id = tenant_id


class RunNotFound(UnderwayError):
    """No run with this id exists in this tenant."""

    def __init__(self, tenant_id: str, run_id: str) -> None:
        super().__init__(f"no run {run_id!r} in tenant {tenant_id!r}")
        self.tenant_id = tenant_id
        self.run_id = run_id


class ServiceError(UnderwayError):
    """A client over HTTP got no usable answer from ``underway serve``. The server cannot be
    reached, or it refused the API key (unknown or revoked: 401; a role that may not do
    this: 403), or it failed (5xx). The message says which, and what to do.

    Args:
        message: What happened.
        status: The HTTP status (None: no answer at all).
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NonDeterminismError(UnderwayError):
    """A step, run again after a crash, issued a different call than the journal records.

    Keep step code deterministic. Read time, randomness and ids through ``ctx.now()``,
    ``ctx.random()`` and ``ctx.uuid()``.

    Args:
        run_id: The run.
        step: The step.
        index: The call's index within the step.
        expected: The call the journal records.
        actual: The call the code asks for now.
    """

    def __init__(self, run_id: str, step: str, index: int, expected: str, actual: str) -> None:
        super().__init__(
            f"run {run_id}: step {step!r} call #{index} is {actual}, "
            f"but the journal records {expected}; step code must issue the same calls "
            "in the same order when it runs again"
        )
        self.run_id = run_id
        self.step = step
        self.index = index


class ToolCallError(UnderwayError):
    """A tool call failed. Raised inside the step at ``await ctx.call(...)``.

    Args:
        tool: The tool's name.
        error_type: The original exception's class name, as journaled.
        message: What went wrong.
        retryable: Whether trying again may help.
        retry_after: Seconds the tool asked to wait before a retry, if any.
        credentials_rejected: True when the service refused the tool's credentials.
    """

    def __init__(
        self, tool: str, error_type: str, message: str, *, retryable: bool,
        retry_after: float | None = None, credentials_rejected: bool = False,
    ) -> None:
        super().__init__(f"tool {tool!r} failed: {error_type}: {message}")
        self.credentials_rejected = credentials_rejected
        """The tool's service refused its credentials (see :mod:`underway.secrets`)."""
        self.tool = tool
        self.error_type = error_type
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after
        """Seconds the failed service asked to wait before trying again (``Retry-After``),
        when the tool's error said so; :meth:`RetryPolicy.delay` honours it."""


class EgressDenied(UnderwayError):
    """A tool tried to reach a host outside the hosts it declares (``@tool(hosts=[...])``).

    Nothing was sent. The engine journals the refusal (``ToolRefused``, cause
    ``egress_denied``). The call fails without a retry.

    Args:
        tool: The tool's name.
        host: The host it tried to reach.
        url: The URL it asked for.
        allowed: The hosts it declares.
    """

    def __init__(self, tool: str, host: str, url: str, allowed: tuple[str, ...]) -> None:
        super().__init__(
            f"tool {tool!r} may reach only {', '.join(allowed) or 'no host'}; refused "
            f"{url} (host {host!r}): add the host to the tool's hosts=[...] if it is meant "
            "to be reached"
        )
        self.tool = tool
        self.host = host
        self.url = url
        self.allowed = allowed


class SecretRefused(UnderwayError):
    """A tool needs a secret bound to environments the worker is not in.

    Say, a ``dev`` worker and a ``prod`` credential. It is refused before the tool runs, and
    journaled (``ToolRefused``, cause ``secret_refused``).

    Args:
        name: The secret's name.
        bound: The environments it is bound to.
        environment: The worker's environment.
    """

    def __init__(self, name: str, bound: tuple[str, ...], environment: str) -> None:
        super().__init__(
            f"secret {name!r} belongs to environment {' or '.join(bound)}; this worker "
            f"runs in {environment!r} and may not read it (start a worker with "
            f"--environment {bound[0]} to use it, or give the {environment} environment a "
            "secret of its own)"
        )
        self.name = name
        self.bound = bound
        self.environment = environment


class OutcomeUnknown(UnderwayError):
    """A tool started an effect and lost track of it.

    The request was sent, but the connection broke (reset, read error, malformed answer) or
    timed out before the answer arrived. So the effect **may or may not have happened**.

    Raise it from a tool whenever that is the truth. :func:`underway.http.request` does for
    a mutating request (anything but GET, HEAD, OPTIONS, TRACE) whose answer was lost. A
    failure before the request left (DNS, connection refused) stays an ordinary error.

    It must never be journaled as "did not happen" nor retried blindly. It is like an intent
    without an outcome after a crash. An idempotent tool may be retried with the same key. A
    tool with ``reconcile(key)`` asks the outside system. Any other escalates to a person.
    ``retryable`` is False so that a retry policy never repeats the call on its own.

    Args:
        message: What happened.
        method: The HTTP method of the lost request, if any.
        url: Its URL, if any.
    """

    retryable = False
    outcome_unknown = True
    """Marks an error whose meaning is "the outcome is unknown" (the engine looks for it)."""

    def __init__(self, message: str, *, method: str = "", url: str = "") -> None:
        super().__init__(message)
        self.method = method
        self.url = url


class KeyUnavailable(UnderwayError):
    """A stored payload is encrypted and this process cannot open it: it was given no
    keys (``[encryption]`` in ``underway.toml``, ``--keyring``), or the payload's data key
    was destroyed, or the key provider no longer holds the key that wrapped it. Readers
    show such a payload as ``[encrypted]``; a writer without keys on an encrypted database
    refuses to write plaintext and raises this too.
    """


class SubjectErased(KeyUnavailable):
    """The data subject a payload is about was erased (``underway erase subject``): its
    keys are destroyed, so nothing about it can be opened again, and nothing new about it
    is sealed (a run for it is refused)."""


class ValueTooLarge(UnderwayError, ValueError):
    """A value is larger than the most one stored value may be (``Codec.max_value_bytes``,
    ``[blobs] max_value_bytes`` in underway.toml). Nothing of it was stored.

    Args:
        what: The value, in words (``the result of tool 'fetch' (call <key>)``).
        size: Its encoded size in bytes (at least this; counting stopped past the limit).
        limit: The limit in bytes.
    """

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} is {size:,} bytes encoded, over the limit of {limit:,} bytes for one "
            "stored value; nothing of it was stored. Return less (a reference to where the "
            "data lives, or a part of it), or raise [blobs] max_value_bytes"
        )
        self.what = what
        self.size = size
        self.limit = limit


class IntegrityError(UnderwayError):
    """Stored data does not match its hash, chain or schema."""


class ResultInvalid(IntegrityError):
    """A tool's journaled result does not validate against its result model now.

    The model changed since the call was journaled. The run stops for an operator. They may
    make the model accept the journaled result (a default, an optional field) and resume.

    Args:
        tool: The tool's name.
        key: The call's idempotency key.
        model: The result model's name.
        fields: The fields that fail.
        detail: What the validation said.
    """

    def __init__(
        self, tool: str, key: str, model: str, fields: list[str], detail: str
    ) -> None:
        super().__init__(
            f"the journaled result of tool {tool!r} (call {key}) does not validate against "
            f"its result model {model}: fields {', '.join(fields)}; make the model accept "
            f"the journaled result and resume the run. {detail}"
        )
        self.tool = tool
        self.key = key
        self.fields = fields


class StoreError(UnderwayError):
    """The store refused an operation."""


class ConflictError(StoreError):
    """The run's journal moved past the sequence number the writer expected."""


class FencedError(StoreError):
    """The writer's lease token is stale: another worker owns the run now."""


class MigrationError(StoreError):
    """The database schema cannot be brought to the version this code expects."""


def is_store_failure(exc: BaseException) -> bool:
    """True when ``exc`` is the database's failure, not the run's (a :class:`StoreError`,
    or an error of the ``sqlite3`` or ``psycopg`` driver): such a run is handed back and
    tried again later, never dead-lettered for it."""
    if isinstance(exc, StoreError | sqlite3.Error):
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.Error)


class RunCancelledSignal(BaseException):
    """Raised inside a step when its run was cancelled; not catchable as ``Exception``."""


__all__ = [
    "AmbiguousRunId",
    "ConfigurationError",
    "ConflictError",
    "EgressDenied",
    "FencedError",
    "FieldProblem",
    "IntegrityError",
    "InvalidInput",
    "KeyUnavailable",
    "MigrationError",
    "MissingExtra",
    "NonDeterminismError",
    "OutcomeUnknown",
    "ResidencyError",
    "ResultInvalid",
    "RunNotFound",
    "SecretRefused",
    "ServiceError",
    "SignedResolutionRequired",
    "StoreError",
    "ToolCallError",
    "UnderwayError",
    "ValueTooLarge",
]
