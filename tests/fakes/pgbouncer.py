"""A real PgBouncer in transaction pooling mode in front of the test PostgreSQL, in a
throwaway directory on a free port of its own (``scripts/ensure-pgbouncer`` installs it).

Trust authentication, as the test server's: PgBouncer still wants an ``auth_file`` naming
the users it lets in, so one is written. PgBouncer refuses to run as root: started as root
it becomes the ``postgres`` user (its ``user`` setting)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

START_PATIENCE_S = 60.0
"""How long PgBouncer may take to listen before the fixture calls it broken."""


@dataclass(frozen=True)
class PgBouncer:
    """A running PgBouncer (transaction mode) in front of one PostgreSQL server.

    Args:
        port: Where it listens, on 127.0.0.1.
        logfile: Its log.
        server_url: The URL of the server it stands in front of.
    """

    port: int
    logfile: Path
    server_url: str

    def route(self, url: str, *, listen: bool = False) -> str:
        """``url`` (a direct PostgreSQL URL) reached through this PgBouncer, with
        ``pooler=transaction``; with ``listen``, ``listen_url=`` names ``url``'s server
        directly for LISTEN."""
        parts = urlsplit(url)
        params = parse_qsl(parts.query, keep_blank_values=True)
        direct = urlunsplit(parts._replace(
            query=urlencode([(k, v) for k, v in params if k != "schema"], quote_via=quote)))
        params.append(("pooler", "transaction"))
        if listen:
            params.append(("listen_url", direct))
        user = f"{parts.username}@" if parts.username else ""
        netloc = f"{user}127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc,
                                         query=urlencode(params, quote_via=quote)))

    def log(self) -> str:
        """The end of its log."""
        with contextlib.suppress(OSError):
            return self.logfile.read_text(errors="replace")[-4000:]
        return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 1):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def throwaway_pgbouncer(server_url: str, *, pool_size: int = 16) -> Iterator[PgBouncer]:
    """Start PgBouncer in transaction mode in front of ``server_url``'s server (every
    database, its users let in by trust); stop it and remove its directory afterwards,
    whatever happened. Fails (never skips) when PgBouncer is missing or does not start.

    Args:
        server_url: A URL of the PostgreSQL server to stand in front of.
        pool_size: Server connections per database and user.
    """
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        raise AssertionError("pgbouncer is not installed (scripts/ensure-pgbouncer installs "
                             "the Debian package)")
    server = urlsplit(server_url)
    user = server.username or "postgres"
    home = Path(tempfile.mkdtemp(prefix="underway-pgbouncer-"))
    port = _free_port()
    logfile = home / "pgbouncer.log"
    (home / "users.txt").write_text(f'"{user}" ""\n')
    (home / "pgbouncer.ini").write_text(f"""\
[databases]
* = host={server.hostname or '127.0.0.1'} port={server.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {home / 'users.txt'}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
server_idle_timeout = 10
logfile = {logfile}
pidfile = {home / 'pgbouncer.pid'}
""")
    if os.getuid() == 0:
        # PgBouncer refuses to run as root: it becomes the postgres user once started.
        with (home / "pgbouncer.ini").open("a") as ini:
            ini.write("user = postgres\n")
        for path in (home, home / "users.txt", home / "pgbouncer.ini"):
            shutil.chown(path, "postgres")
    # Quiet (-q): it logs to its logfile only. Its log on a pipe nobody reads would fill
    # the pipe and stop it.
    proc = subprocess.Popen([binary, "-q", str(home / "pgbouncer.ini")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    bouncer = PgBouncer(port, logfile, server_url)
    try:
        deadline = time.monotonic() + START_PATIENCE_S
        while not _answers(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"PgBouncer did not start:\n{bouncer.log()}")
            time.sleep(0.05)
        yield bouncer
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)
