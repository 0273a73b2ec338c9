"""``GET /v1/runs/{id}/stream``: a run's model tokens as Server-Sent Events, from a real
server, while a worker streams a call from a local OpenAI wire server. A client sees the
first tokens while the model is still answering, resumes with ``Last-Event-ID`` without
seeing a delta twice, and the stream ends once the run has finished."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from pydantic import BaseModel

import underway as uw
from fakes.model_provider import FakeProvider, openai_stream
from fakes.service_world import World
from underway.models import Message, ModelRequest, OpenAIChat
from underway.runner import Runner


class S(BaseModel):
    pass


def streaming_flow(model: OpenAIChat) -> uw.Flow[S, Any]:
    flow = uw.Flow("storyteller", state=S)

    @flow.step
    async def tell(ctx: uw.RunContext[S, Any]) -> Any:
        reply = await ctx.model(model, ModelRequest(
            messages=[Message.user("A short story")], max_tokens=64).to_json(), stream=True)
        return ctx.done(reply)

    return flow


def frames(world: World, run_id: str, *, after: str | None = None, seen: int = 0,
           on_seen: threading.Event | None = None,
           tenant: str = "acme") -> tuple[int, list[tuple[str, str, dict[str, Any]]]]:
    """Read the run's live stream to its end: (status, [(id, event, data)...]); sets
    ``on_seen`` once ``seen`` deltas have arrived."""
    got: list[tuple[str, str, dict[str, Any]]] = []
    headers = {**world.headers(tenant, "viewer"), **({"Last-Event-ID": after} if after else {})}
    with world.http.stream("GET", f"/v1/runs/{run_id}/stream", headers=headers) as r:
        if r.status_code != 200:
            return r.status_code, got
        assert r.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in r.iter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if "event" in fields:
                got.append((fields.get("id", ""), fields["event"], json.loads(fields["data"])))
                if on_seen is not None and len(got) >= seen:
                    on_seen.set()
            fields = {}
    return 200, got


def test_tokens_stream_live_and_a_reconnect_resumes_after_its_offset(db_url: str) -> None:
    hold = threading.Event()
    world = World(db_url)
    with FakeProvider(openai_stream("Once ", "upon ", "a ", "time.", hold=hold,
                                    hold_after=3)) as provider:
        model = OpenAIChat("gpt-4o-mini", api_key="sk-test", base_url=f"{provider.origin}/v1")
        flow = streaming_flow(model)
        world.engine = uw.Engine(world.worker_store, flows=[flow], clock=world.clock)
        run_id, _ = world.engine.start(flow, tenant_id="acme")
        seen_two = threading.Event()
        result: dict[str, Any] = {}

        def read() -> None:
            result["first"] = frames(world, run_id, seen=2, on_seen=seen_two)

        reader = threading.Thread(target=read)
        reader.start()
        async def work() -> None:
            async with model:
                await Runner(world.engine).run_until_idle()

        worker = threading.Thread(target=lambda: asyncio.run(work()))
        worker.start()
        # The model holds after two words: the reader has them while the call runs.
        assert seen_two.wait(60), "the first tokens reached the reader before the answer ended"
        assert world.engine.state(run_id, tenant_id="acme").status != "completed"
        hold.set()
        worker.join(60)
        reader.join(60)
    status, got = result["first"]
    assert status == 200 and got[-1][1] == "end"
    deltas = [(int(i), data) for i, kind, data in got if kind == "delta"]
    assert [d["delta"].get("text") for _, d in deltas] == ["Once ", "upon ", "a ", "time.",
                                                           None]
    assert deltas[-1][1]["delta"] == {"type": "done"}
    offsets = [o for o, _ in deltas]
    assert offsets == sorted(set(offsets)) and offsets == [d["offset"] for _, d in deltas]
    assert world.engine.state(run_id, tenant_id="acme").status == "completed"

    status, again = frames(world, run_id, after=str(offsets[1]))
    assert status == 200
    assert [int(i) for i, kind, _ in again if kind == "delta"] == offsets[2:]
    assert again[-1] == ("", "end", {"offset": offsets[-1]})
    assert frames(world, run_id, tenant="globex")[0] == 404
    world.close()


def test_a_bad_last_event_id_is_refused(db_url: str) -> None:
    world = World(db_url)
    run_id = world.start()
    r = world.call("GET", f"/v1/runs/{run_id}/stream", role="viewer",
                   headers={"Last-Event-ID": "not-a-number"})
    assert r.status_code == 422 and "header.last-event-id" in r.text
    world.close()


def test_an_open_live_stream_ends_when_its_key_is_revoked(db_url: str) -> None:
    world = World(db_url)
    run_id = world.start()  # a run that waits for a signal: it streams nothing yet
    opened = threading.Event()
    got: list[tuple[str, str]] = []

    def read() -> None:
        with world.http.stream("GET", f"/v1/runs/{run_id}/stream",
                               headers=world.headers(role="viewer")) as r:
            assert r.status_code == 200
            opened.set()
            fields: dict[str, str] = {}
            for line in r.iter_lines():
                if line:
                    name, _, value = line.partition(": ")
                    fields[name] = value
                    continue
                if "event" in fields:
                    got.append((fields["event"], fields["data"]))
                fields = {}

    reader = threading.Thread(target=read)
    reader.start()
    assert opened.wait(30)
    key_id = world.token["acme"]["viewer"].split("_")[1]
    assert world.store.revoke_api_key("acme", key_id, at=world.clock.now())
    reader.join(60)
    assert not reader.is_alive()
    assert [kind for kind, _ in got] == ["unauthorized"] and "revoked" in got[0][1]
    assert world.call("GET", f"/v1/runs/{run_id}/stream", role="viewer").status_code == 401
    world.close()
