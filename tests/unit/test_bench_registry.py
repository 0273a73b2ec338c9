"""``make bench`` starts: every group's module imports and names callables, whatever order
the modules load in (one module's import path must not hide another's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_every_bench_group_loads_from_its_own_module() -> None:
    code = (
        "import inspect, run\n"
        "for group, benches in run.GROUPS.items():\n"
        "    for label, fn in benches:\n"
        "        assert callable(fn), (group, label)\n"
        "        where = inspect.getsourcefile(fn)\n"
        "        assert where and where.startswith(" + repr(str(BENCH)) + "), (group, where)\n"
        "print(len(run.GROUPS))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=BENCH, capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 20
