"""Restate, the way its Python SDK documentation writes a durable handler: a service whose
handler runs each step through ``ctx.run`` (``run_typed``), served over HTTP/2 by
hypercorn, registered with a Restate server (started by ``bench/peers.py`` on 127.0.0.1,
its data in a temporary directory, its configuration the default one).

``DB`` is ``restate`` and ``URL`` is ``INGRESS_URL,ADMIN_URL,SDK_PORT``. The benchmark's
client (the thread that sends the invocations to the server's ingress) runs in this
process too, beside the handler. A killed run is resumed the documented way: the server
retries the invocation on its retry policy, and a fresh process on the same address
replays its journal; the fresh process sends the same request with the same idempotency
key, which attaches it to the run in progress. Runs in the peers' virtual environment; see
``protocol.py`` for the modes.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from importlib.metadata import version
from typing import Any

import httpx
import protocol
import restate
from hypercorn.asyncio import serve
from hypercorn.config import Config
from protocol import CLOCK, step_result

bench = restate.Service("PeersBench")


async def run_step(run_id: str, i: int) -> dict[str, Any]:
    """One step: its ~200-byte result is journaled by the server before the handler goes on."""
    CLOCK.enter(i)
    return step_result(run_id, i)


@bench.handler()
async def loop(ctx: restate.Context, req: dict[str, Any]) -> int:
    """A run of ``req["n"]`` steps, one after another."""
    run_id, steps = str(req["run"]), int(req["n"])
    for i in range(steps):
        await ctx.run_typed("step", run_step, restate.RunOptions(), run_id=run_id, i=i)
    return steps


app = restate.app(services=[bench])
TIMEOUT = httpx.Timeout(600.0, connect=10.0)


class RestatePeer:
    """The handler served on ``SDK_PORT``, and a client of the server's ingress."""

    def __init__(self, db: str, url: str) -> None:
        if db != "restate":
            raise SystemExit(f"the Restate worker keeps its data in the Restate server, not {db}")
        self.ingress, self.admin, port = url.split(",")
        self.endpoint = f"http://127.0.0.1:{port}"
        self._stop = threading.Event()
        self._up = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(int(port),), daemon=True)
        self._thread.start()
        if not self._up.wait(30):
            raise RuntimeError("hypercorn did not start")
        self._register()
        self.client = httpx.Client(timeout=TIMEOUT)

    def _serve(self, port: int) -> None:
        # The settings the SDK's documentation gives hypercorn, bound to loopback.
        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.h2_max_concurrent_streams = 2147483647
        config.keep_alive_max_requests = 2147483647
        config.keep_alive_timeout = 2147483647

        async def main() -> None:
            stop = asyncio.Event()

            async def watch() -> None:
                while not self._stop.is_set():
                    await asyncio.sleep(0.05)
                stop.set()

            watcher = asyncio.create_task(watch())
            self._up.set()
            await serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
            watcher.cancel()

        asyncio.run(main())

    def _register(self) -> None:
        """Tell the server where the handler is (once; a fresh process on the same address
        finds itself registered)."""
        known = httpx.get(f"{self.admin}/deployments", timeout=TIMEOUT).json()
        if any(d.get("uri", "").rstrip("/") == self.endpoint
               for d in known.get("deployments", [])):
            return
        for _ in range(100):
            resp = httpx.post(f"{self.admin}/deployments", json={"uri": self.endpoint},
                              timeout=TIMEOUT)
            if resp.status_code < 300:
                return
            time.sleep(0.1)  # hypercorn may still be binding its socket
        raise RuntimeError(f"registering {self.endpoint}: {resp.status_code} {resp.text}")

    def _call(self, run_id: str, steps: int) -> int:
        resp = self.client.post(f"{self.ingress}/PeersBench/loop",
                                json={"run": run_id, "n": steps},
                                headers={"idempotency-key": run_id})
        resp.raise_for_status()
        return int(resp.json())

    def sequential(self, runs: int, steps: int) -> None:
        for _ in range(runs):
            run_id = f"seq-{uuid.uuid4().hex}"
            if self._call(run_id, steps) != steps:
                raise RuntimeError(f"invocation {run_id} did not run {steps} steps")

    def in_flight(self, runs: int, steps: int) -> None:
        async def all_at_once() -> list[int]:
            limits = httpx.Limits(max_connections=runs + 10, max_keepalive_connections=runs)
            async with httpx.AsyncClient(timeout=TIMEOUT, limits=limits) as client:
                async def one(run_id: str) -> int:
                    resp = await client.post(f"{self.ingress}/PeersBench/loop",
                                             json={"run": run_id, "n": steps},
                                             headers={"idempotency-key": run_id})
                    resp.raise_for_status()
                    return int(resp.json())

                return await asyncio.gather(*(one(f"fly-{uuid.uuid4().hex}")
                                              for _ in range(runs)))

        if any(n != steps for n in asyncio.run(all_at_once())):
            raise RuntimeError(f"an invocation in flight did not run {steps} steps")

    def crash(self, run_id: str, steps: int) -> None:
        self._call(run_id, steps)

    def resume(self, run_id: str, steps: int) -> Any:
        return self._call(run_id, steps)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


if __name__ == "__main__":
    protocol.main(RestatePeer, f"restate-sdk {version('restate-sdk')}, "
                  f"hypercorn {version('hypercorn')}")
