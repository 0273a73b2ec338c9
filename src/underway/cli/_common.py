"""What every command shares: finding the database, opening the store, reporting errors.

Every failure ends the command with one line on stderr, never a traceback. The exit
status says whose move it is:

* 2, a usage error: the command must change. A bad option or argument, a file, run or
  name that does not exist, a config that cannot be used, a request the run refuses, no
  keys given for an encrypted database.
* 1, a runtime failure: the command was sound and failed while it ran. The database
  unreachable or not migrated, stored data that fails its checks.

Commands that report findings (``audit verify``, ``drill``...) keep their own codes: 1
for a finding, 2 when they could not check (:func:`handle_check_errors`). Set
``UNDERWAY_DEBUG=1`` to see the traceback of an unexpected error.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn, ParamSpec, TypeVar

import typer
from pydantic import BaseModel

from .._extras import import_extra
from ..client import Client
from ..config import Config, find_config, load_config
from ..crypto import EnvKey, KeyProvider, KeyringFile, encrypt, refuse_plaintext
from ..errors import (
    ConfigurationError,
    KeyUnavailable,
    RunNotFound,
    SignedResolutionRequired,
    UnderwayError,
)
from ..events import JSON
from ..loading import App, load_app
from ..store import connect
from ..store._urls import split_url
from ..store.access import check_purpose
from ..store.base import AccessRecord, RunRecord, Store
from ..store.queries import latest_version

P = ParamSpec("P")
R = TypeVar("R")

USAGE = 2
"""Exit status for a usage error: bad arguments, URL, run id, JSON, a missing file."""
FAILURE = 1
"""Exit status for a runtime failure: the command was sound and failed while it ran."""

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL: sqlite:///path.db, postgresql://user@host/db[?schema=s] or "
        "memory://. Defaults to $UNDERWAY_DB.",
        show_default=False,
    ),
]
TenantOption = Annotated[str, typer.Option("--tenant", help="Tenant the run belongs to.")]
KeyringOption = Annotated[
    Path | None,
    typer.Option(
        "--keyring",
        help="The keyring file whose key-encryption key opens an encrypted database "
        "(`underway keys init`). Defaults to $UNDERWAY_KEYRING; $UNDERWAY_KEK (a KEK in "
        "the environment) serves when no keyring is named.",
        show_default=False,
    ),
]

NO_KEYS = (
    "give the keys: --keyring FILE (or $UNDERWAY_KEYRING), $UNDERWAY_KEK, or [encryption] "
    "in underway.toml for `underway worker` and `underway serve`"
)
"""How to give a command keys, said wherever they are missing."""


@dataclass(frozen=True, slots=True)
class RootOptions:
    """The options given before the command: ``underway --db URL --keyring FILE ...``."""

    database: str | None = None
    keyring: Path | None = None
PurposeOption = Annotated[str, typer.Option(
    "--purpose", help="Why you read the run's data: written to the access log with who and "
    "when (1 to 100 characters).")]
LabelFilterOption = Annotated[list[str] | None, typer.Option(
    "--label", help="Only runs with this label, as name=value (repeat: all must match). "
    "A value matches by its text: qty=7 finds 7 and \"7\".", show_default=False)]
LabelOption = Annotated[list[str] | None, typer.Option(
    "--label", help="A label of the run, as name=value (repeat for more). A number or "
    "true/false is typed when its text is exactly that value.", show_default=False)]
RevealOption = Annotated[bool, typer.Option(
    "--reveal", help="Show the fields tools declare sensitive (the access log records "
    "it); secrets are never shown.")]
ReaderOption = Annotated[str | None, typer.Option(
    "--by", help="Who is reading, for the access log (default: your OS user name).",
    show_default=False)]


class Problem(Exception):
    """A usage error, told in one line: exit status 2."""


class Failure(Problem):
    """A runtime failure of a sound command, told in one line: exit status 1."""


_USAGE_ERRORS = (
    Problem, ConfigurationError, RunNotFound, SignedResolutionRequired, KeyUnavailable,
    FileNotFoundError, IsADirectoryError, NotADirectoryError,
)
"""What the user must change the command for (a :class:`Failure` aside)."""


def exit_status(exc: Exception) -> int:
    """The exit status of a command that ``exc`` ended: 2 or 1 (see the module)."""
    if isinstance(exc, Failure):
        return FAILURE
    return USAGE if isinstance(exc, _USAGE_ERRORS) else FAILURE


def fail(message: str, *, status: int = USAGE) -> NoReturn:
    """Print ``message`` as an error and exit with ``status`` (2 by default)."""
    typer.echo(f"underway: error: {message}", err=True)
    raise typer.Exit(status)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, UnderwayError | Problem):
        return str(exc)
    if isinstance(exc, sqlite3.Error):
        return f"SQLite: {exc}"
    if type(exc).__module__.startswith("psycopg"):
        lines = [line.strip() for line in str(exc).strip().splitlines()]
        return " ".join(lines) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn any exception escaping a command into a one-line message: exit status 2 for
    a usage error, 1 for a runtime failure."""
    return _handled(fn, exit_status)


def handle_check_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """As :func:`handle_errors`, for a command whose status 1 is a finding: any error
    exits 2 (the check could not be made), so it is never taken for a finding."""
    return _handled(fn, lambda exc: USAGE)


def _handled(fn: Callable[P, R], status: Callable[[Exception], int]) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except BrokenPipeError:
            # The reader went away (``| head``): stop quietly, as other tools do.
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            raise typer.Exit(0) from None
        except Exception as exc:
            if os.environ.get("UNDERWAY_DEBUG"):
                raise
            fail(_describe(exc), status=status(exc))

    return wrapper


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="The config file (docs/configuration.md); its command-line options override "
        "it. Default: ./underway.toml when there is one.",
        show_default=False,
    ),
]


def read_config(path: Path | None, command: str) -> Config:
    """The config file ``--config`` names, else ``./underway.toml`` when there is one
    (said on stderr, so a file nobody asked for never acts unannounced), else the
    defaults. A bad file raises :class:`~underway.config.ConfigError`: nothing starts."""
    found = find_config(path)
    if found is None:
        return Config()
    if path is None:
        typer.echo(f"underway {command}: reading {found} (pass --config FILE to read "
                   "another)", err=True)
    return load_config(found)


S = TypeVar("S", bound=BaseModel)


def override(section: S, **options: object) -> S:
    """``section`` of the config file with the command-line ``options`` that were given
    (not None) in place of its values."""
    return section.model_copy(update={k: v for k, v in options.items() if v is not None})


def search_path(config: Config | None = None) -> list[str]:
    """Where a command imports the code an option names from, before ``sys.path``: the
    current directory, then the config file's folder (when there is one)."""
    folder = None if config is None or config.folder is None else str(config.folder)
    return [os.getcwd()] + ([folder] if folder is not None else [])


def app_code(spec: str, config: Config | None = None) -> App:
    """The flows and tools ``--app spec`` names, imported as ``underway worker`` imports
    them (:func:`search_path` first): every command that takes ``--app`` loads it here."""
    return load_app(spec, search=search_path(config))


def database_url(ctx: typer.Context, db: str | None, default: str | None = None) -> str:
    """The URL from the command's ``--db``, else the global ``--db``, else
    ``$UNDERWAY_DB``, else ``default`` (a config file's ``database``)."""
    url = _given_url(ctx, db) or default
    if not url:
        raise Problem("no database given: pass --db URL or set UNDERWAY_DB (or give "
                      "database or [residency] in underway.toml)")
    return url


def _given_url(ctx: typer.Context, db: str | None) -> str | None:
    root = ctx.find_root().obj
    return (db or (root.database if isinstance(root, RootOptions) else None)
            or os.environ.get("UNDERWAY_DB"))


def _sqlite_path(url: str) -> str | None:
    if not url.startswith("sqlite://"):
        return None
    path = url.removeprefix("sqlite://")
    return path[1:] if path.startswith("/") else path


def key_provider(
    ctx: typer.Context, config: Config | None = None, keyring: Path | None = None
) -> KeyProvider | None:
    """The keys a command was given: ``keyring`` (the command's own ``--keyring``), else
    the global ``--keyring``, else ``$UNDERWAY_KEYRING``, else a KEK in ``$UNDERWAY_KEK``
    (its subject vault in ``$UNDERWAY_SUBJECTS``, if set),
    else ``config``'s ``[encryption]``; None when none was."""
    root = ctx.find_root().obj
    path = keyring or (root.keyring if isinstance(root, RootOptions) else None) \
        or os.environ.get("UNDERWAY_KEYRING") or None
    if path:
        return KeyringFile(path)
    if os.environ.get("UNDERWAY_KEK"):
        return EnvKey("UNDERWAY_KEK", subjects=os.environ.get("UNDERWAY_SUBJECTS") or None)
    return config.make_key_provider() if config is not None else None


@contextmanager
def open_store(
    ctx: typer.Context, db: str | None, *, migrate: bool = False, config: Config | None = None,
    keyring: Path | None = None, need_keys: bool = False,
) -> Iterator[Store]:
    """Open the store named by ``db`` / the global ``--db`` / ``$UNDERWAY_DB``, else by
    the config file (``config``; when not given, ``./underway.toml`` if there is one): its
    ``[residency]`` (a :class:`~underway.store.regional.RegionalStore` over every region's
    database) or its ``database``. Close it afterwards.

    Without ``migrate`` each database must already hold an underway schema: a mistyped
    SQLite path is reported instead of silently creating an empty database.

    Encryption: with keys (:func:`key_provider`) every payload read or written through the
    store is sealed and opened; without them, a database that holds encrypted payloads
    reads them as ``[encrypted]`` and refuses to store plaintext — or, with
    ``need_keys``, the command stops at once, saying how to give keys.
    """
    url = _given_url(ctx, db)
    if url is None:
        if config is None:
            config = _config_here()
        if config.residency is not None:
            with _open_regions(config, migrate) as regional:
                _keys(ctx, regional, config, keyring, need_keys)
                yield regional
            return
    with _open_url(database_url(ctx, db, config.database if config else None),
                   migrate) as store:
        _keys(ctx, store, config, keyring, need_keys)
        yield store


def _keys(ctx: typer.Context, store: Store, config: Config | None, keyring: Path | None,
          need_keys: bool) -> None:
    """Give ``store`` the keys the command was given, or make it refuse plaintext on an
    encrypted database (see :func:`open_store`)."""
    provider = key_provider(ctx, config, keyring)
    enc = config.encryption if config is not None else None
    if provider is not None:
        encrypt(store, provider, refresh=enc.refresh if enc is not None else 5.0)
    elif refuse_plaintext(store, NO_KEYS) and need_keys:
        raise Problem(f"the database holds encrypted payloads and this command was given "
                      f"no keys: {NO_KEYS}")


def _config_here() -> Config:
    """``./underway.toml`` when there is one (said on stderr when it names the database),
    else the defaults."""
    found = find_config(None)
    if found is None:
        return Config()
    config = load_config(found)
    if config.database is not None or config.residency is not None:
        typer.echo(f"underway: the database is the one {found} names (pass --db URL for "
                   "another)", err=True)
    return config


@contextmanager
def _open_regions(config: Config, migrate: bool) -> Iterator[Store]:
    """Every region's database of ``config``'s ``[residency]``, as one regional store."""
    assert config.residency is not None
    with contextlib.ExitStack() as opened:
        stores: dict[str, Store] = {}
        for region, url in config.residency.regions.items():
            try:
                stores[region] = _open(url, migrate)
            except Problem as exc:
                raise type(exc)(f"region {region!r}: {exc}") from None
            opened.callback(stores[region].close)
        yield config.regional_store(stores)


@contextmanager
def _open_url(url: str, migrate: bool) -> Iterator[Store]:
    """The store at ``url``, checked; closed afterwards."""
    store = _open(url, migrate)
    try:
        yield store
    finally:
        store.close()


def _open(url: str, migrate: bool) -> Store:
    """Open the store at ``url``; without ``migrate``, check it holds the schema this code
    needs (a clear :class:`Problem` otherwise, and nothing stays open)."""
    path = _sqlite_path(url)
    if not migrate and path and not os.path.exists(path):
        raise Problem(f"no SQLite database at {path!r}; create one with `underway db migrate`")
    if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise Problem(f"cannot open SQLite database {path!r}: its directory does not exist")
    if url.startswith(("postgresql://", "postgres://")):
        _probe_postgres(url)
    store = connect(url, migrate=migrate or url.startswith("memory:"))
    if migrate:
        return store
    try:
        found = store.schema_version()
        if found == 0:
            raise Failure("the database has no underway schema; run `underway db migrate` "
                          "first")
        if store.dialect != "memory" and found < (known := latest_version(store.dialect)):
            raise Failure(
                f"the database's schema is at version {found} and this underway needs "
                f"{known}: run `underway db migrate` (nothing was changed)"
            )
    except BaseException:
        store.close()
        raise
    return store


def _probe_postgres(url: str) -> None:
    """Fail fast with the server's own reason (refused, unknown database, bad password)
    instead of letting the connection pool retry until its timeout."""
    # The PostgreSQL driver loads only for a PostgreSQL URL.
    psycopg = import_extra("psycopg", what="a PostgreSQL URL", extra="postgres")
    conninfo, _ = split_url(url)
    try:
        psycopg.connect(conninfo, connect_timeout=5).close()
    except psycopg.Error as exc:
        raise Failure(f"cannot connect to PostgreSQL: {_describe(exc)}") from None


def parse_json(text: str | None, option: str) -> JSON:
    """Parse the JSON given to ``option`` (None when the option was not given)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise Problem(f"invalid JSON for {option}: {exc}") from None


@contextmanager
def open_client(ctx: typer.Context, db: str | None,
                config: Path | None = None) -> Iterator[Client]:
    """A client on the store named by ``db`` / ``$UNDERWAY_DB`` (see :func:`open_store`).
    It refuses unsigned resolutions and resumes when the deployment's config file
    (``config``, else ``./underway.toml``, the file the workers and ``underway serve``
    read by default) says ``[approvals] signed_resolutions = true``."""
    found = find_config(config)
    signed = found is not None and load_config(found).approvals.signed_resolutions
    with open_store(ctx, db) as store:
        yield Client(store, signed_resolutions=signed)


def find_run(client: Client, tenant_id: str, run: str) -> RunRecord:
    """The run a RUN argument names — its id, or a prefix of exactly one run's id; a clear
    error when none matches (or, naming them, when several do)."""
    try:
        return client.find_run(run, tenant_id=tenant_id)
    except RunNotFound:
        raise Problem(
            f"no run {run!r} in tenant {tenant_id!r}"
            + ("" if tenant_id != "default" else " (use --tenant for another tenant)")
        ) from None


def run_id_of(store: Store, tenant_id: str, run: str, *,
              known: Callable[[str], bool] | None = None) -> str:
    """The run id a run option names, for a command that reads records kept about runs (an
    access log, a journal) rather than the runs themselves: a whole id that ``known``
    says is on record stays as it is, even when its run row is gone; else the id of the
    one run whose id it is or starts with (:func:`find_run`). None matching, or several,
    is an error naming the problem, never an empty answer.

    Args:
        store: The store to look in.
        tenant_id: The tenant.
        run: What the option said.
        known: Whether records name ``run`` as a whole id (None: only runs count).
    """
    if store.get_run(tenant_id, run) is None and known is not None and known(run):
        return run
    return find_run(Client(store), tenant_id, run).run_id


def parse_time(text: str | None, option: str) -> float | None:
    """Epoch seconds from ``option``'s value: ISO 8601 (``2026-12-01``,
    ``2026-12-01T09:30``; UTC unless it names an offset) or epoch seconds."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise Problem(f"{option} {text!r} is not a time: give ISO 8601 (2026-12-01 or "
                      "2026-12-01T09:30:00+02:00) or epoch seconds") from None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


def record_read(store: Store, command: str, tenant_id: str, run_ids: list[str], *,
                purpose: str, by: str | None, revealed: bool = False) -> None:
    """Append one access-log entry per run whose data ``underway <command>`` is about to
    print (who: ``by`` or the OS user; ``key_id`` ``cli``): a read the log could not
    record is not printed."""
    try:
        purpose = check_purpose(purpose)
    except ValueError as exc:
        raise Problem(f"--purpose: {exc}") from None
    who = by if by is not None else _os_user()
    if not who.strip():
        raise Problem("--by must name who is reading")
    now = time.time()
    store.log_access([AccessRecord(tenant_id, now, "cli", who, run_id, f"cli {command}",
                                   purpose=purpose, revealed=revealed)
                      for run_id in run_ids])


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid:{os.getuid()}"


def warn_undeclared(flow: str, name: str) -> None:
    """Tell the user (on stderr) that a signal went to a run whose flow declares none."""
    typer.echo(
        f"warning: flow {flow!r} declares no signals, so nothing checks that a step waits "
        f"for {name!r}; declare them with Flow(signals=[...]) to refuse unknown names",
        err=True,
    )
