"""Streaming a model call through a durable run, and through a SIGKILL.

    python examples/streaming/demo.py [--db URL] [--serve]

1. A local model server (``wire.py``, OpenAI's wire format) tells a short story a word at
   a time. A worker process runs a flow whose step asks for it with
   ``ctx.model(model, request, stream=True)``.
2. This process follows the run's live stream (``Client.stream``) and prints each word as
   it arrives. After a few words the worker is killed with SIGKILL, mid-answer.
3. A fresh worker takes the run over and asks the model again. The stream says so first
   (a ``restart`` delta); the words that follow are the new answer. The demo never prints
   a word twice: it only asks for what comes after the last offset it saw.
4. The journal holds the whole answer once, and the run counted one model call.

With ``--serve`` the API and the console also run (as ``underway serve`` does): the demo
prints the run page's address and a viewer's key, and waits until the console follows the
run (its live stream appears in the access log) before the story starts. It keeps serving
until Ctrl-C. It exits non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import underway as uw
from streaming.wire import STORY, WireServer
from underway import events as ev
from underway.models import Message, ModelRequest, OpenAIChat, Price, PriceTable
from underway.store.streams import StreamDelta

KILL_AFTER = 6
"""Words the worker streams before it is killed."""


class Story(BaseModel):
    """The run's state: nothing to keep, the answer is the result."""


def storyteller(base_url: str) -> uw.Flow[Story, Any]:
    """One step: ask the model for the story, streamed."""
    model = OpenAIChat("story-1", api_key="unused", base_url=base_url,
                       prices=PriceTable({"story-1": Price(input=0.0, output=0.0)}))
    flow: uw.Flow[Story, Any] = uw.Flow("storyteller", state=Story)

    @flow.step(start=True)
    async def tell(ctx: uw.RunContext[Story, Any]) -> Any:
        reply = await ctx.model(model, ModelRequest(
            messages=[Message.user("Tell me a very short story.")], max_tokens=200,
        ).to_json(), stream=True)
        return ctx.done(reply)

    return flow


def work(db: str, base_url: str, run_id: str) -> int:
    """The worker (a child process): drive the run to its end."""
    engine = uw.Engine(uw.connect(db), flows=[storyteller(base_url)], lease_ttl=1.0)
    state = asyncio.run(uw.Runner(engine, poll=0.05).run_until_complete(run_id))
    return 0 if state.status == "completed" else 1


def spawn(db: str, base_url: str, run_id: str) -> subprocess.Popen[bytes]:
    """A worker in a fresh process."""
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "work",
                             "--db", db, "--base-url", base_url, "--run-id", run_id])


def say(text: str = "", end: str = "\n") -> None:
    """Print at once (the output interleaves with the workers')."""
    print(text, end=end, flush=True)


def serve(db: str, run_id: str) -> tuple[Any, str]:
    """The API and the console on 127.0.0.1 (what ``underway serve`` runs), and a viewer's
    key to sign in with; returns once the console follows the run. The server's store
    stays open while it serves."""
    from underway.apikeys import issue_key
    from underway.service import ServerThread, create_app

    store = uw.connect(db)
    token = issue_key(store, tenant_id="default", role="viewer", name="streaming-demo",
                      now=time.time()).token
    server = ServerThread(create_app(uw.Client(store)))
    server.start()
    say(f"console: {server.url}/runs/{run_id}")
    say(f"sign in at {server.url}/login with the viewer key {token}")
    say("waiting for the console to open the run page...")
    stream = "GET /runs/{run_id}/stream"
    while not any(a.endpoint == stream for a in store.list_access("default", run_id=run_id)):
        time.sleep(0.2)
    return server, token


def demo(db: str, *, with_console: bool) -> int:
    """The demonstration; the process's exit status."""
    failures: list[str] = []
    client = uw.Client(uw.connect(db))
    run_id, _ = client.start("storyteller", {})
    with WireServer(hold_after=KILL_AFTER) as wire:
        server = serve(db, run_id)[0] if with_console else None
        say(f"[1] worker 1 streams run {run_id}; it is killed after {KILL_AFTER} words")
        worker = spawn(db, wire.base_url, run_id)
        seen: list[StreamDelta] = []
        killed = threading.Event()

        async def follow() -> None:
            words = 0
            async for d in client.stream(run_id):
                seen.append(d)
                kind = d.delta.get("type") if isinstance(d.delta, dict) else None
                if kind == "text" and isinstance(d.delta, dict):
                    words += 1
                    say(str(d.delta["text"]), end="")
                    if words == KILL_AFTER and not killed.is_set():
                        worker.send_signal(signal.SIGKILL)
                        worker.wait()
                        killed.set()
                        say("\n[2] worker 1 killed (SIGKILL) mid-answer; worker 2 takes "
                            "the run over")
                        wire.release()
                        spawn_second()
                elif kind == "restart" and isinstance(d.delta, dict):
                    say(f"    [restart: attempt {d.delta['attempt']} asks the model again; "
                        "the words above are abandoned]")
                elif kind == "done":
                    say("\n    [done: the reply is journaled]")

        second: list[subprocess.Popen[bytes]] = []

        def spawn_second() -> None:
            second.append(spawn(db, wire.base_url, run_id))

        asyncio.run(follow())
        if second:
            second[0].wait()
        requests = wire.requests
        if server is not None:
            say("serving the console; Ctrl-C to stop")
            try:
                signal.sigwait({signal.SIGINT, signal.SIGTERM})
            finally:
                server.stop()
    offsets = [d.offset for d in seen]
    if offsets != sorted(set(offsets)):
        failures.append("an offset was seen twice or out of order")
    if worker.returncode != -signal.SIGKILL:
        failures.append(f"worker 1 ended with {worker.returncode}, not by SIGKILL")
    state = client.state(run_id)
    answers = [r.event.response for r in client.history(run_id)
               if isinstance(r.event, ev.ModelResponded)]
    say()
    say("[3] the journal")
    if state.status != "completed":
        failures.append(f"the run ended {state.status}")
    if len(answers) != 1 or not isinstance(answers[0], dict) or answers[0]["text"] != STORY:
        failures.append("the journal does not hold the whole answer exactly once")
    if state.model_calls != 1:
        failures.append(f"the run counted {state.model_calls} model calls, not 1")
    say(f"    one ModelResponded with the whole story; model calls counted: "
        f"{state.model_calls}; requests the model server saw: {requests}")
    client.store.close()
    for failure in failures:
        say(f"FAIL: {failure}")
    if not failures:
        say("OK: streamed live, never a word twice, answer journaled once, one call counted")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    """``demo.py [--db URL] [--serve]``; ``demo.py work ...`` is the worker."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", nargs="?", choices=["demo", "work"], default="demo")
    parser.add_argument("--db", help="the database (default: a new SQLite file)")
    parser.add_argument("--serve", action="store_true", help="also serve the console")
    parser.add_argument("--base-url", help="(worker) the model server")
    parser.add_argument("--run-id", help="(worker) the run")
    args = parser.parse_args(argv)
    if args.mode == "work":
        return work(args.db, args.base_url, args.run_id)
    db = args.db or f"sqlite:///{Path(tempfile.mkdtemp(prefix='underway-stream-')) / 'u.db'}"
    if args.serve:
        # Ctrl-C is waited for (sigwait), not raised in the middle of the demo.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    os.environ.pop("UNDERWAY_CRASH_AFTER", None)
    return demo(db, with_console=args.serve)


if __name__ == "__main__":
    sys.exit(main())
