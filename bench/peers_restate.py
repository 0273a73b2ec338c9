"""The Restate server ``peers.py`` measures against: the binary that the npm package
``@restatedev/restate-server`` installs (``scripts/ensure-peers`` puts it under
``.venv-peers/restate/`` and writes its path to ``.venv-peers/restate-server.path``), run
with its default configuration except where it listens and keeps its data: every port on
127.0.0.1, the data in a temporary directory removed afterwards, and its usage telemetry
off.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import httpx

from peers_measure import tree_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH_FILE = os.path.join(ROOT, ".venv-peers", "restate-server.path")


def server_binary() -> tuple[str | None, str]:
    """(path of the ``restate-server`` binary, or None; why not, when None)."""
    path = os.environ.get("PEERS_RESTATE_SERVER")
    if not path and os.path.exists(PATH_FILE):
        with open(PATH_FILE, encoding="utf-8") as f:
            path = f.read().strip()
    if not path:
        return None, ("the Restate server is not installed (scripts/ensure-peers installs "
                      "the npm package @restatedev/restate-server)")
    if not os.access(path, os.X_OK):
        return None, f"the Restate server binary {path} is missing or not executable"
    return path, ""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RestateServer:
    """One ``restate-server`` process on loopback ports, its data in a temporary directory."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.data = tempfile.mkdtemp(prefix="peers-restate-", dir=os.environ.get(
            "UNDERWAY_BENCH_TMP"))
        self.ingress_port, self.admin_port, node_port = free_port(), free_port(), free_port()
        self.sdk_port = free_port()
        self.log_path = os.path.join(self.data, "server.log")
        env = {
            **os.environ,
            "RESTATE_LISTEN_MODE": "tcp",
            "RESTATE_BIND_ADDRESS": f"127.0.0.1:{node_port}",
            "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{node_port}/",
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{self.ingress_port}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{self.admin_port}",
            "RESTATE_NODE_NAME": "peers-bench",
            "RESTATE_DISABLE_TELEMETRY": "true",
        }
        self.store = os.path.join(self.data, "store")
        self._log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [binary, "--no-logo", "--base-dir", self.store], env=env,
            stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready()

    @property
    def ingress(self) -> str:
        """The ingress URL (where invocations are sent)."""
        return f"http://127.0.0.1:{self.ingress_port}"

    @property
    def admin(self) -> str:
        """The admin API URL (where deployments are registered)."""
        return f"http://127.0.0.1:{self.admin_port}"

    def worker_url(self) -> str:
        """What a Restate peer worker takes as its URL: ingress, admin, its own port."""
        return f"{self.ingress},{self.admin},{self.sdk_port}"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"restate-server exited {self.proc.returncode}: "
                                   f"{self.log_tail()}")
            try:
                admin = httpx.get(f"{self.admin}/health", timeout=2)
                ingress = httpx.get(f"{self.ingress}/restate/health", timeout=2)
                if admin.status_code == 200 and ingress.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"restate-server did not become ready: {self.log_tail()}")

    def version(self) -> str:
        """``restate-server --version``."""
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True,
                             check=False)
        return out.stdout.strip() or out.stderr.strip()

    def log_tail(self) -> str:
        """The end of the server's log."""
        self._log.flush()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-2000:]

    def stored_bytes(self) -> int:
        """Bytes of the files in the server's data directory."""
        return tree_bytes(self.store)

    def close(self) -> None:
        """Stop the server and remove its data."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.data, ignore_errors=True)
