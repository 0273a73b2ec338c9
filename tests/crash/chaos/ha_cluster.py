"""A real Patroni cluster of the test's own: one etcd, a primary and a synchronous standby.

:func:`patroni_cluster` starts it in a temporary directory on free ports and stops every
process afterwards, even when the test fails. PostgreSQL refuses to run as root, so
Patroni (which runs the server) runs as the ``postgres`` user when the tests run as root.
Everything waits on conditions read from Patroni's REST API (``/leader``, ``/sync``,
``/cluster``), never on time.

The cluster keeps the settings docs/high-availability.md asks for: ``synchronous_mode``
on and ``synchronous_commit = on``, so a commit is acknowledged once the standby has it.
It is not ``synchronous_mode_strict``: with two nodes, strict mode would stop every
write while the survivor of a failover has no standby, and the test needs the survivor
to carry on. ``fsync`` is off: the test kills processes, never the machine, so the
operating system keeps every page written, and a busy machine commits faster.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

PG_BIN = Path("/usr/lib/postgresql/15/bin")
UP_TIMEOUT_S = 300.0
"""Starting the cluster (initdb, a base backup) on a busy machine: a hang guard only."""
CHANGE_TIMEOUT_S = 180.0
"""A failover or switchover that has not completed by then is broken."""
TTL_S = 10
"""The leader key's time to live: how long after its primary dies Patroni promotes the
standby, at most (plus one ``LOOP_WAIT_S``)."""
LOOP_WAIT_S = 1
RETRY_TIMEOUT_S = 3
"""Patroni's rule: ``loop_wait + 2 * retry_timeout <= ttl``."""


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Node:
    """One Patroni member and the PostgreSQL server it runs."""

    name: str
    home: Path
    pg_port: int
    api_port: int
    popen: subprocess.Popen[bytes] | None = None
    killed: bool = False

    @property
    def data_dir(self) -> Path:
        """The server's data directory."""
        return self.home / "data"

    @property
    def config(self) -> Path:
        """Patroni's configuration file for this member."""
        return self.home / "patroni.yml"

    @property
    def api(self) -> str:
        """Patroni's REST API."""
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def url(self) -> str:
        """This server alone (whatever its role)."""
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/postgres"

    def status(self, path: str) -> int:
        """The REST API's HTTP status for ``GET path`` (0 when it does not answer)."""
        try:
            with urllib.request.urlopen(self.api + path, timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def replicating(self, *, synchronously: bool) -> bool:
        """Whether this server streams to a standby — one it waits for at each commit,
        when ``synchronously`` (what Patroni says, checked against the server itself)."""
        sync = "sync" if synchronously else "async"
        with contextlib.suppress(psycopg.Error), \
                psycopg.connect(self.url, connect_timeout=5, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state "
                               "= %s AND state = 'streaming'", [sync]).fetchone()
            return row is not None and int(row[0]) > 0
        return False

    def postmaster_pid(self) -> int | None:
        """The server's postmaster, from its pid file (None when it is not running)."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the server's backends, walsender...)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The command name is in parentheses and may hold spaces: read after it.
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
            if ppid == pid:
                found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Cluster:
    """A running Patroni cluster: etcd, and :attr:`nodes` (two members)."""

    scope: str
    root: Path
    etcd_port: int
    nodes: list[Node]
    as_postgres: bool
    synchronous: bool = True
    etcd: subprocess.Popen[bytes] | None = None
    events: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The multi-host URL clients use: every member, the writable one chosen."""
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def member(self, name: str) -> Node:
        """The node called ``name``."""
        return next(n for n in self.nodes if n.name == name)

    def members(self) -> list[dict[str, Any]]:
        """Patroni's view of the cluster (``GET /cluster`` on any live member)."""
        for node in self.nodes:
            if node.killed:
                continue
            with contextlib.suppress(OSError, ValueError), \
                    urllib.request.urlopen(node.api + "/cluster", timeout=5) as resp:
                found: list[dict[str, Any]] = json.loads(resp.read())["members"]
                return found
        return []

    def leader(self) -> Node | None:
        """The member that answers as the writable primary (None during a change)."""
        for node in self.nodes:
            if not node.killed and node.status("/leader") == 200 and \
                    node.status("/primary") == 200:
                return node
        return None

    def wait_healthy(self, timeout: float = CHANGE_TIMEOUT_S) -> tuple[Node, Node]:
        """Wait until one live member leads and another is its standby — synchronous,
        unless the cluster is not — streaming; (leader, standby)."""
        deadline = time.monotonic() + timeout
        role = "sync_standby" if self.synchronous else "replica"
        while True:
            roles = {m.get("name"): (m.get("role"), m.get("state")) for m in self.members()}
            leader = self.leader()
            sync = [n for n in self.nodes if not n.killed and n is not leader
                    and roles.get(n.name, (None, None))[0] == role
                    and roles[n.name][1] in ("streaming", "running")
                    and n.status("/sync" if self.synchronous else "/replica") == 200]
            if leader is not None and sync and \
                    leader.replicating(synchronously=self.synchronous):
                return leader, sync[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no healthy leader with a synchronous standby after "
                                     f"{timeout:.0f}s: {roles}\n{self.logs()}")
            time.sleep(0.1)

    def wait_writable(self, not_on: Node | None = None,
                      timeout: float = CHANGE_TIMEOUT_S) -> Node:
        """Wait until a member other than ``not_on`` is the primary and takes a write
        through the multi-host URL; that member."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.leader()
            if leader is not None and leader is not not_on:
                with contextlib.suppress(psycopg.Error), \
                        psycopg.connect(self.url, connect_timeout=5, autocommit=True) as c:
                    row = c.execute("SELECT inet_server_port()").fetchone()
                    if row is not None and int(row[0]) == leader.pg_port:
                        return leader
            if time.monotonic() > deadline:
                raise AssertionError(f"no new writable primary after {timeout:.0f}s: "
                                     f"{self.members()}\n{self.logs()}")
            time.sleep(0.05)

    def switchover(self, leader: Node, candidate: Node) -> None:
        """Ask Patroni for a planned switchover from ``leader`` to ``candidate``."""
        body = json.dumps({"leader": leader.name, "candidate": candidate.name}).encode()
        req = urllib.request.Request(leader.api + "/switchover", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            if resp.status != 200:
                raise AssertionError(f"switchover refused: {resp.status} {resp.read()!r}")
        self.events.append(f"switchover {leader.name} -> {candidate.name}")

    def kill(self, node: Node) -> None:
        """SIGKILL ``node``'s Patroni and its PostgreSQL server, every process of it, as
        a machine that dies would: nothing stops cleanly, nothing is handed over."""
        pid = node.postmaster_pid()
        assert node.popen is not None
        node.popen.send_signal(signal.SIGKILL)
        node.popen.wait()
        if pid is not None:
            victims = [pid, *_children(pid)]
            for victim in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
        node.killed = True
        self.events.append(f"killed {node.name}")

    def logs(self) -> str:
        """The tail of every member's Patroni log, for a failure message."""
        out = []
        for node in self.nodes:
            log = node.home / "patroni.log"
            if log.exists():
                out.append(f"--- {node.name}\n{log.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def stop(self) -> None:
        """Stop every process of the cluster (SIGTERM, then SIGKILL)."""
        for node in self.nodes:
            if node.popen is not None and node.popen.poll() is None:
                node.popen.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.popen is not None:
                try:
                    node.popen.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    node.popen.kill()
                    node.popen.wait()
            pid = node.postmaster_pid()
            if pid is not None and _alive(pid):
                for victim in [pid, *_children(pid)]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(victim, signal.SIGKILL)
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.kill()
            self.etcd.wait()


def _config(cluster: Cluster, node: Node) -> str:
    """Patroni's configuration for ``node`` (YAML is a superset of JSON)."""
    conf = {
        "scope": cluster.scope,
        "name": node.name,
        "log": {"dir": str(node.home), "file_num": 1, "level": "INFO"},
        "restapi": {"listen": f"127.0.0.1:{node.api_port}",
                    "connect_address": f"127.0.0.1:{node.api_port}"},
        "etcd3": {"hosts": [f"127.0.0.1:{cluster.etcd_port}"]},
        "bootstrap": {
            "dcs": {
                "ttl": TTL_S, "loop_wait": LOOP_WAIT_S, "retry_timeout": RETRY_TIMEOUT_S,
                "maximum_lag_on_failover": 1048576,
                "synchronous_mode": cluster.synchronous,
                "synchronous_mode_strict": False,
                "postgresql": {
                    "use_pg_rewind": False,
                    "use_slots": True,
                    "parameters": {
                        "synchronous_commit": "on",
                        "wal_level": "replica",
                        "hot_standby": "on",
                        "max_wal_senders": 5,
                        "max_replication_slots": 5,
                        "max_connections": 200,
                        "fsync": "off",
                        "full_page_writes": "off",
                        "wal_keep_size": "256MB",
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"auth-host": "trust"}, {"auth-local": "trust"},
                       "no-sync"],
            "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                       "host replication all 127.0.0.1/32 trust"],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{node.pg_port}",
            "connect_address": f"127.0.0.1:{node.pg_port}",
            "data_dir": str(node.data_dir),
            "bin_dir": str(PG_BIN),
            "pgpass": str(node.home / "pgpass"),
            "authentication": {
                "superuser": {"username": "postgres", "password": "postgres"},
                "replication": {"username": "replicator", "password": "replicator"},
            },
            "parameters": {"unix_socket_directories": str(node.home),
                           "authentication_timeout": "5s"},
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False,
                 "nosync": False},
    }
    return json.dumps(conf, indent=1)


def _start_etcd(cluster: Cluster) -> None:
    peer = free_port()
    data = cluster.root / "etcd"
    client = f"http://127.0.0.1:{cluster.etcd_port}"
    cmd = ["etcd", "--name", "e0", "--data-dir", str(data),
           "--listen-client-urls", client, "--advertise-client-urls", client,
           "--listen-peer-urls", f"http://127.0.0.1:{peer}",
           "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
           "--initial-cluster", f"e0=http://127.0.0.1:{peer}",
           "--initial-cluster-state", "new", "--initial-cluster-token", cluster.scope]
    with (cluster.root / "etcd.log").open("wb") as out:
        cluster.etcd = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + UP_TIMEOUT_S
    while True:
        with contextlib.suppress(OSError), \
                urllib.request.urlopen(client + "/health", timeout=5) as resp:
            if json.loads(resp.read()).get("health") in ("true", True):
                return
        if cluster.etcd.poll() is not None or time.monotonic() > deadline:
            log = (cluster.root / "etcd.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"etcd did not start:\n{log}")
        time.sleep(0.05)


def start_node(cluster: Cluster, node: Node) -> None:
    """Start ``node``'s Patroni (as the postgres user when we are root)."""
    node.config.write_text(_config(cluster, node))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "UNDERWAY"))}
    env["PATH"] = os.pathsep.join([str(PG_BIN), "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
    if cluster.as_postgres:
        shutil.chown(node.config, "postgres")
    env["HOME"] = str(node.home)
    # As the postgres user by setuid in the child, not through runuser: runuser would
    # stand between the test and Patroni, and a SIGKILL would reach only runuser.
    user = {"user": "postgres", "group": "postgres", "extra_groups": []} \
        if cluster.as_postgres else {}
    with (node.home / "patroni.out").open("wb") as out:
        node.popen = subprocess.Popen(["patroni", str(node.config)], stdout=out,  # type: ignore[call-overload]
                                      stderr=subprocess.STDOUT, env=env, cwd=node.home,
                                      **user)
    node.killed = False


@contextlib.contextmanager
def patroni_cluster(*, synchronous: bool = True) -> Iterator[Cluster]:
    """Start etcd and two Patroni members (a primary and its standby, synchronous unless
    ``synchronous`` is False) in a temporary directory, wait until the standby streams,
    and stop all of it afterwards. Fails (never skips) when a binary is missing."""
    for binary in ("etcd", "patroni"):
        if shutil.which(binary) is None:
            raise AssertionError(f"{binary} is missing: run scripts/ensure-patroni")
    if not (PG_BIN / "postgres").exists():
        raise AssertionError(f"no PostgreSQL server in {PG_BIN} (scripts/ensure-postgres)")
    root = Path(tempfile.mkdtemp(prefix="underway-patroni-"))
    as_postgres = os.getuid() == 0
    nodes = []
    for i in range(2):
        home = root / f"node{i}"
        home.mkdir()
        nodes.append(Node(f"node{i}", home, free_port(), free_port()))
    cluster = Cluster(f"uw-{root.name[-8:]}", root, free_port(), nodes, as_postgres,
                      synchronous)
    try:
        if as_postgres:
            for path in [root, *(n.home for n in nodes)]:
                shutil.chown(path, "postgres")
        _start_etcd(cluster)
        start_node(cluster, nodes[0])
        # The first member bootstraps the cluster; the second then clones it.
        deadline = time.monotonic() + UP_TIMEOUT_S
        while nodes[0].status("/leader") != 200:
            if (nodes[0].popen is not None and nodes[0].popen.poll() is not None) or \
                    time.monotonic() > deadline:
                raise AssertionError(f"the first member did not lead:\n{cluster.logs()}\n"
                                     f"{(nodes[0].home / 'patroni.out').read_text()[-3000:]}")
            time.sleep(0.1)
        start_node(cluster, nodes[1])
        cluster.wait_healthy(UP_TIMEOUT_S)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
