"""A streamed model call across a worker SIGKILL, on SQLite and PostgreSQL.

A real worker process streams a model call from a local OpenAI or Anthropic wire server. The server
holds the answer after two words; a consumer following the run's live stream has them;
the worker is killed with SIGKILL. A second process takes the run over and makes the call
again. The consumer, which only ever asks for what comes after its last offset, sees
offsets that strictly increase and no offset twice; it learns the partial answer was
abandoned from a ``restart`` delta. The journal holds the complete answer once, and the
budget (one model call at most) counted one call.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import underway as uw
from fakes.model_provider import FakeProvider, anthropic_stream, openai_stream
from fakes.processes import CHILD_TIMEOUT_S, finish
from underway import events as ev
from underway.journal import Journal
from underway.store import connect
from underway.store.streams import StreamDelta

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

WORKER = Path(__file__).with_name("stream_worker.py")
WORDS = ("Once ", "upon ", "a ", "time.")


def worker(url: str, base_url: str, run_id: str, provider: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    return subprocess.Popen([sys.executable, str(WORKER), "--db", url, "--base-url",
                             base_url, "--run", run_id,
                             *(["--anthropic"] if provider == "anthropic" else [])], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_consumer_never_sees_a_token_twice_across_a_kill(
        db: str, provider: str, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    store = connect(url)
    client = uw.Client(store)
    run_id, _ = client.start("story", {})
    hold = threading.Event()
    # The opening events (OpenAI: the role chunk; Anthropic: the message and its text
    # block), "Once ", "upon ", then the server holds.
    wire = openai_stream if provider == "openai" else anthropic_stream
    cut = wire(*WORDS, hold=hold, hold_after=3 if provider == "openai" else 4)
    seen: list[StreamDelta] = []
    two_words = threading.Event()

    def consume() -> None:
        async def go() -> None:
            reader = connect(url, migrate=False)
            try:
                async for d in uw.Client(reader).stream(run_id):
                    seen.append(d)
                    if sum(x.delta.get("type") == "text" for x in seen
                           if isinstance(x.delta, dict)) >= 2:
                        two_words.set()
            finally:
                reader.close()
        asyncio.run(go())

    with FakeProvider(cut, wire(*WORDS)) as server:
        consumer = threading.Thread(target=consume)
        consumer.start()
        first = worker(url, f"{server.origin}/v1", run_id, provider)
        try:
            assert two_words.wait(CHILD_TIMEOUT_S), "the first words reached the consumer"
        finally:
            first.send_signal(signal.SIGKILL)
        assert finish(first), "the first worker was killed mid-answer"
        hold.set()
        second = worker(url, f"{server.origin}/v1", run_id, provider)
        assert not finish(second)
        consumer.join(CHILD_TIMEOUT_S)
        assert not consumer.is_alive()
        requests = len(server.received)

    offsets = [d.offset for d in seen]
    assert offsets == sorted(set(offsets)), "offsets strictly increase, none seen twice"
    shown: list[Any] = [d.delta.get("text", d.delta) if isinstance(d.delta, dict) else d.delta
                        for d in seen]
    assert shown == ["Once ", "upon ", {"type": "restart", "attempt": 2}, *WORDS,
                     {"type": "done"}]
    assert [d.attempt for d in seen] == [1, 1, 2, 2, 2, 2, 2, 2]
    history = Journal(store).history("default", run_id)
    responded = [r.event for r in history if isinstance(r.event, ev.ModelResponded)]
    assert len(responded) == 1 and isinstance(responded[0].response, dict)
    assert responded[0].response["text"] == "".join(WORDS)
    state = client.state(run_id)
    assert state.status == "completed" and state.model_calls == 1, \
        "the budget of one model call counted one call"
    assert requests == 2, "the model was asked once per attempt"
    store.close()
