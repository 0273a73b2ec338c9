"""Sandbox profiles: what ``describe()`` tells an auditor, when digests change, and the
clear errors bad profiles get."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import replace
from typing import Any

import pytest

from underway.errors import ConfigurationError
from underway.sandbox import Limits, SandboxProfile


def test_describe_spells_out_backend_network_mounts_limits_and_user() -> None:
    profile = SandboxProfile(backend="bwrap", ro_paths=["/srv/data"], rw_paths=("/srv/out",),
                             env_allow=("LANG",), limits=Limits(memory_mb=256, timeout_s=5))
    d = profile.describe()
    assert d["backend"] == "bwrap"
    assert d["network"] is False
    assert d["root"] == "read-only"
    mounts = {m["path"]: m["mode"] for m in d["mounts"]}
    assert mounts["/usr"] == "ro"
    assert mounts["/srv/data"] == "ro"
    assert mounts["/srv/out"] == "rw"
    assert mounts["/workspace"] == "rw"
    assert mounts["/tmp"] == "tmpfs"
    assert "/etc/resolv.conf" not in mounts, "no name resolution without the network"
    assert d["limits"]["memory_mb"] == 256 and d["limits"]["timeout_s"] == 5
    assert d["env_allow"] == ["LANG"]
    assert d["user"] == {"uid": 65534, "gid": 65534}
    json.dumps(d)  # plain JSON


def test_digest_is_the_sha256_of_the_canonical_description() -> None:
    profile = SandboxProfile()
    canonical = json.dumps(profile.describe(), sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False).encode()
    assert profile.digest() == hashlib.sha256(canonical).hexdigest()
    assert SandboxProfile().digest() == profile.digest(), "equal profiles, equal digests"


@pytest.mark.parametrize("change", [
    {"network": True},
    {"backend": "bwrap"},
    {"ro_paths": ("/srv/data",)},
    {"rw_paths": ("/srv/data",)},
    {"python": True},
    {"env_allow": ("HOME",)},
    {"uid": 1000},
    {"limits": Limits(max_processes=8)},
    {"limits": Limits(output_cap_bytes=10)},
    {"workspace_dir": "/work"},
])
def test_every_rule_changes_the_digest(change: dict[str, Any]) -> None:
    assert replace(SandboxProfile(), **change).digest() != SandboxProfile().digest()


def test_python_shows_the_interpreter_prefix_read_only() -> None:
    prefix = os.path.realpath(sys.base_prefix)
    mount = {"path": prefix, "mode": "ro", "source": prefix}
    assert mount in SandboxProfile(python=True).mounts()
    assert mount not in SandboxProfile().mounts()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"backend": "chroot"}, "backend 'chroot' is unknown"),
    ({"ro_paths": "/srv"}, "is a string"),
    ({"ro_paths": ("srv",)}, "must be an absolute path"),
    ({"rw_paths": ("/",)}, "other than '/'"),
    ({"rw_paths": ("/srv/../etc",)}, "normalized"),
    ({"ro_paths": ("/proc/1",)}, "sit under /proc"),
    ({"rw_paths": ("/usr/local",)}, "sit under /usr"),
    ({"rw_paths": ("/tmp",)}, "private /tmp"),
    ({"workspace_dir": "workspace"}, "workspace_dir 'workspace' must be an absolute path"),
    ({"env_allow": ("NOT-A-NAME",)}, "not a variable name"),
    ({"uid": 0}, "unprivileged id"),
])
def test_bad_profiles_are_refused_naming_the_problem(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        SandboxProfile(**kwargs)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"memory_mb": 0}, "memory_mb=0"),
    ({"max_processes": -1}, "max_processes=-1"),
    ({"timeout_s": 0}, "timeout_s=0"),
    ({"output_cap_bytes": -1}, "output_cap_bytes=-1"),
    ({"cpus": 0.0}, "cpus=0.0"),
])
def test_bad_limits_are_refused_naming_the_limit(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Limits(**kwargs)


def test_limits_may_be_switched_off() -> None:
    limits = Limits(cpu_seconds=None, memory_mb=None, file_size_mb=None, max_processes=None)
    assert [name for name, _, _ in limits.rlimits()] == ["RLIMIT_CORE"]
