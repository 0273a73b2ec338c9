"""A drill's worker process: ``python -m underway.ops.drills._worker PLAN``.

It is ``underway worker`` on the drill's scratch database, with the app loaded by the
same code (:func:`underway.loading.load_app`), its tools instrumented and
:mod:`underway.http` intercepted as the plan says. ``UNDERWAY_CRASH_AFTER`` in its
environment arms the fault points (:mod:`underway.faults`) that kill it. It prints
``ready`` once it serves and stops gracefully on SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from ...engine import Engine
from ...http import install_interceptor
from ...loading import load_app
from ...secrets import EnvSecrets
from ...store import connect
from ...worker import Worker
from ._inject import DrillSecrets, Injector
from ._plan import Plan


async def _serve(worker: Worker) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    serving = asyncio.create_task(worker.run())
    await worker.ready.wait()
    print("ready", flush=True)
    await serving


def main(argv: list[str]) -> int:
    """Serve the drill's runs until SIGTERM (or a fault point's SIGKILL)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s drill worker %(process)d %(message)s")
    plan = Plan.load(Path(argv[0]))
    flows, tools = load_app(plan.app, search=[os.getcwd()])
    store = connect(plan.db, migrate=False)
    try:
        inner = (EnvSecrets(prefix=plan.secrets_env_prefix)
                 if plan.secrets_env_prefix is not None else None)
        engine = Engine(store, flows=flows, tools=tools, lease_ttl=plan.lease_ttl,
                        environment=plan.environment, secrets=DrillSecrets(inner))
        injector = Injector(plan)
        injector.instrument(list(engine.tools.values()))
        install_interceptor(injector.intercept)
        worker = Worker(engine, concurrency=8, poll=0.1, grace=2.0)
        asyncio.run(_serve(worker))
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
