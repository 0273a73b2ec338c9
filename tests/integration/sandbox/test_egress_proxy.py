"""A sandboxed command reaches the network only through the allow-listing proxy, and only
the hosts its profile lists: real bubblewrap sandboxes, a real local HTTP server on the
host. Without ``hosts`` there is still no network at all; a program that ignores the
proxy reaches nothing; a refused host never sees a byte, and the result says what was
refused."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from fakes.host_site import HostSite
from underway.errors import ConfigurationError
from underway.sandbox import Limits, SandboxProfile, run_command, shell_tool
from underway.testing import memory_engine

PY = "/usr/bin/python3"
LIMITS = Limits(timeout_s=60)


@pytest.fixture
def site() -> Iterator[HostSite]:
    with HostSite() as served:
        yield served


class S(BaseModel):
    pass


def fetch(url: str) -> list[str]:
    """A command fetching ``url`` with urllib, which follows the proxy variables."""
    return [PY, "-c", "import urllib.request, sys\n"
            f"try:\n    print(urllib.request.urlopen({url!r}, timeout=20).read().decode())\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc); sys.exit(7)"]


def profile(*hosts: str) -> SandboxProfile:
    return SandboxProfile(backend="bwrap", hosts=hosts, limits=LIMITS)


def test_a_listed_host_is_reached_through_the_proxy(site: HostSite) -> None:
    for host in ("127.0.0.1", "localhost"):
        r = run_command(fetch(f"http://{host}:{site.port}/page?q=1"), profile=profile(host))
        assert r.ok and r.stdout == "hello from the host\n", r.stderr
        assert r.egress_refused == ()
    assert site.paths == ["/page?q=1", "/page?q=1"]


def test_a_host_not_listed_is_refused_and_never_reached(site: HostSite) -> None:
    r = run_command(fetch(f"http://127.0.0.1:{site.port}/secret"), profile=profile("*.example.com"))
    assert r.exit_code == 7 and "HTTP Error 403" in r.stdout
    assert r.egress_refused == (f"127.0.0.1:{site.port}",)
    assert site.paths == []


def test_connect_tunnels_to_listed_hosts_only(site: HostSite) -> None:
    """HTTPS goes through CONNECT: a raw tunnel, here carrying plain HTTP."""
    tunnel = (
        "import socket, sys\n"
        "s = socket.create_connection(('127.0.0.1', 3128))\n"
        "s.sendall(b'CONNECT ' + sys.argv[1].encode() + b' HTTP/1.1\\r\\n\\r\\n')\n"
        "head = s.recv(4096)\n"
        "print(head.split(b'\\r\\n')[0].decode())\n"
        "if b' 200 ' in head:\n"
        "    s.sendall(b'GET /tunnelled HTTP/1.1\\r\\nHost: x\\r\\n'\n"
        "              b'Connection: close\\r\\n\\r\\n')\n"
        "    data = b''\n"
        "    while chunk := s.recv(4096):\n"
        "        data += chunk\n"
        "    print(data.split(b'\\r\\n\\r\\n', 1)[1].decode())\n")
    ok = run_command([PY, "-c", tunnel, f"127.0.0.1:{site.port}"], profile=profile("127.0.0.1"))
    assert ok.ok and ok.stdout.splitlines() == [
        "HTTP/1.1 200 Connection established", "hello from the host"], ok.stderr
    no = run_command([PY, "-c", tunnel, f"127.0.0.1:{site.port}"], profile=profile("api.bank.in"))
    assert no.ok and no.stdout.splitlines() == ["HTTP/1.1 403 Forbidden"]
    assert no.egress_refused == (f"127.0.0.1:{site.port}",)
    assert site.paths == ["/tunnelled"]


def test_without_the_proxy_there_is_no_way_out(site: HostSite) -> None:
    direct = [PY, "-c", "import socket, sys\n"
              "try:\n"
              f"    socket.create_connection(('127.0.0.1', {site.port}), timeout=5)\n"
              "except OSError as exc:\n"
              "    print('refused', type(exc).__name__); sys.exit(0)\n"
              "sys.exit(1)"]
    for p in (profile("127.0.0.1"), SandboxProfile(backend="bwrap", limits=LIMITS)):
        r = run_command(direct, profile=p)
        assert r.ok and r.stdout.startswith("refused"), (r.stdout, r.stderr)
    # Still no network by default: no proxy either.
    r = run_command(fetch(f"http://127.0.0.1:{site.port}/x"),
                    profile=SandboxProfile(backend="bwrap", limits=LIMITS))
    assert r.exit_code == 7 and "URLError" in r.stdout
    assert site.paths == []


def test_the_profile_says_what_it_allows_and_refuses_what_cannot_hold() -> None:
    p = profile("API.example.com", "*.bank.in")
    assert p.describe()["hosts"] == ["api.example.com", "*.bank.in"]
    assert "hosts" not in SandboxProfile().describe()
    assert p.digest() != profile("api.example.com").digest()
    with pytest.raises(ConfigurationError, match="give one or the other"):
        SandboxProfile(hosts=["a.example.com"], network=True)
    with pytest.raises(ConfigurationError, match="bubblewrap only"):
        SandboxProfile(hosts=["a.example.com"], backend="docker")
    with pytest.raises(ConfigurationError, match="bare host name"):
        SandboxProfile(hosts=["https://a.example.com"])
    with pytest.raises(ConfigurationError, match="would hide the egress proxy"):
        SandboxProfile(hosts=["a.example.com"], rw_paths=["/run"])


def test_a_shell_tool_journals_what_the_proxy_refused(site: HostSite) -> None:
    sh = shell_tool(name="fetch_page", profile=profile("127.0.0.1"))
    flow: uw.Flow[S, Any] = uw.Flow("egress_shell", state=S, tools=[sh])

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        out = await ctx.call(sh, {"command": (
            f"{PY} -c \"import urllib.request as u\n"
            f"for h in ('127.0.0.1', 'localhost'):\n"
            f"    try: print(u.urlopen('http://' + h + ':{site.port}/p').read().decode())\n"
            f"    except Exception as e: print(e)\"")})
        return ctx.done(out.model_dump() if hasattr(out, "model_dump") else out)

    engine, _ = memory_engine([flow])
    run_id, _ = engine.start(flow)
    asyncio.run(uw.Runner(engine).run_until_idle())
    state = engine.state(run_id)
    assert state.status == "completed", state.error
    assert state.result["egress_refused"] == [f"localhost:{site.port}"]
    assert "hello from the host" in state.result["stdout"]
    assert "403" in state.result["stdout"]
    assert site.paths == ["/p"]
