"""``import underway`` in a fresh interpreter, against an interpreter that imports nothing.

A CLI invocation or a freshly started worker pays this on every start. The figure is the
whole process (``python -c "import underway"``), median of several; the baseline is
``python -c pass`` so the ratio and the difference show what underway itself adds.

The package root loads the client, the executor and the stores on first use, so a
process that runs flows pays more than ``import underway``: ``import_underway_engine``
reads ``underway.Engine`` and ``underway.Client`` too (diagnostic).
"""

from __future__ import annotations

import subprocess
import sys
import time

from common import Figure, median

TARGET_S = 0.3
ENGINE = "import underway; underway.Engine; underway.Client"


def _process_seconds(code: str) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - began


def bench(*, reps: int = 7) -> list[Figure]:
    """Median process time of ``import underway`` and of an empty interpreter."""
    _process_seconds("import underway")
    _process_seconds("pass")
    with_import = [_process_seconds("import underway") for _ in range(reps)]
    empty = [_process_seconds("pass") for _ in range(reps)]
    engine = [_process_seconds(ENGINE) for _ in range(reps)]
    total, base, with_engine = median(with_import), median(empty), median(engine)
    return [
        Figure("import_underway", total, "s", base, total / base, f"value < {TARGET_S} s",
               total < TARGET_S, note="whole process; baseline: python -c pass"),
        Figure("import_underway_added", total - base, "s", note="what the import adds"),
        Figure("import_underway_engine", with_engine, "s", base, with_engine / base,
               note="import underway, then read underway.Engine and underway.Client"),
    ]
