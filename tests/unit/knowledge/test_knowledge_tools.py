"""Agents reading and writing knowledge through tools, in flows run by the engine."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway.errors import ConfigurationError
from underway.knowledge import KnowledgeRecord, open_knowledge, recall_tool, remember_tool
from underway.testing import memory_engine

T0 = 1.7e9  # memory_engine's clock starts here
DAY = 86_400.0


class Question(BaseModel):
    query: str


class Notes(BaseModel):
    found: list[dict[str, Any]] = []
    stored: dict[str, Any] = {}


def rec(text: str, *, id: str, tenant_id: str = "acme", **fields: Any) -> KnowledgeRecord:
    fields.setdefault("source", "https://wiki.acme.example/support")
    return KnowledgeRecord(id=id, tenant_id=tenant_id, text=text, created_at=T0, **fields)


def recall_flow(tool: uw.Tool) -> uw.Flow[Notes, Question]:
    flow = uw.Flow("ask_memory", state=Notes, input=Question)

    @flow.step
    async def look(ctx: uw.RunContext[Notes, Question]) -> Any:
        ctx.state.found = await ctx.call(tool, {"query": ctx.input.query, "limit": 5})
        return ctx.done({"found": ctx.state.found})

    return flow


def test_a_flow_recalls_only_what_its_tenant_may_read_with_provenance() -> None:
    engine, clock = memory_engine()
    knowledge = open_knowledge(engine.store)
    knowledge.put(rec("Ananya prefers SMS reminders in the evening", id="pref",
                      source="tool:crm_lookup"))
    knowledge.put(rec("Reminders go out at 09:00 by default", id="default",
                      sensitivity="public"))
    knowledge.put(rec("Ananya's reminders are paused during audits", id="legal",
                      roles=("legal",)))
    knowledge.put(rec("Ananya's reminder phone is 555-0100", id="phone",
                      sensitivity="personal"))
    knowledge.put(rec("Ananya reminders: trial offer", id="old", expires_at=T0 + DAY))
    knowledge.put(rec("Ananya reminders belong to Globex", id="other", tenant_id="globex"))
    flow = recall_flow(recall_tool(knowledge, clock=clock))
    clock.advance(2 * DAY)

    run_id, _ = engine.start(flow, {"query": "When should Ananya get reminders?"},
                             tenant_id="acme")
    final = asyncio.run(uw.Runner(engine).run_until_complete(run_id, tenant_id="acme"))

    found = final.result["found"]
    assert [item["id"] for item in found] == ["pref", "default"]
    assert found[0] == {
        "id": "pref", "text": "Ananya prefers SMS reminders in the evening",
        "source": "tool:crm_lookup", "created_at": T0, "sensitivity": "internal",
        "score": found[0]["score"],
    }
    assert found[0]["score"] > found[1]["score"]


def test_recall_honours_the_callers_roles_and_the_sensitivity_cap() -> None:
    knowledge = open_knowledge("memory://")
    knowledge.put(rec("Audit calendar: reminders paused in March", id="legal", roles=("legal",)))
    knowledge.put(rec("Reminder phone 555-0100", id="phone", sensitivity="personal"))
    knowledge.put(rec("Reminder wording is friendly", id="open"))
    wide = recall_tool(knowledge, clock=uw.ManualClock(T0), max_sensitivity="personal")
    narrow = recall_tool(knowledge, clock=uw.ManualClock(T0))

    def ask(tool: uw.Tool, roles: tuple[str, ...]) -> list[str]:
        info = uw.CallInfo("k", "acme", "r", "s", 0, principal="asha", roles=roles)
        found = asyncio.run(tool.invoke({"query": "reminder reminders"}, info))
        return sorted(item["id"] for item in found)

    assert ask(narrow, ()) == ["open"]
    assert ask(narrow, ("legal",)) == ["legal", "open"]
    assert ask(wide, ("legal",)) == ["legal", "open", "phone"]


def test_an_agent_remembers_and_recalls_in_a_later_step() -> None:
    engine, clock = memory_engine()
    knowledge = open_knowledge(engine.store)
    remember = remember_tool(knowledge, clock=clock, roles=("support",), retention=30 * DAY)
    recall = recall_tool(knowledge, clock=clock)
    flow = uw.Flow("note_taker", state=Notes, input=Question)

    @flow.step
    async def write(ctx: uw.RunContext[Notes, Question]) -> Any:
        ctx.state.stored = await ctx.call(remember, {
            "text": "Customer asked to be called after 18:00", "metadata": {"channel": "chat"},
        })
        return ctx.goto(read)

    @flow.step
    async def read(ctx: uw.RunContext[Notes, Question]) -> Any:
        ctx.state.found = await ctx.call(recall, {"query": ctx.input.query})
        return ctx.done({"stored": ctx.state.stored, "found": ctx.state.found})

    run_id, _ = engine.start(flow, {"query": "called after"}, tenant_id="acme",
                             principal="asha", roles=("support",))
    final = asyncio.run(uw.Runner(engine).run_until_complete(run_id, tenant_id="acme"))

    stored = final.result["stored"]
    assert stored == {"id": stored["id"], "source": f"run:{run_id}",
                      "expires_at": T0 + 30 * DAY}
    assert [item["id"] for item in final.result["found"]] == [stored["id"]]
    record = knowledge.get("acme", stored["id"])
    assert record is not None
    assert record.roles == ("support",)
    assert record.metadata == {
        "channel": "chat",
        "written_by": {"run_id": run_id, "step": "write", "principal": "asha"},
    }
    # Readable by support only: a run acting for nobody in particular does not see it.
    other, _ = engine.start(recall_flow(recall), {"query": "called after"}, tenant_id="acme")
    final = asyncio.run(uw.Runner(engine).run_until_complete(other, tenant_id="acme"))
    assert final.result["found"] == []


def test_remember_retried_with_the_same_key_stores_one_record_the_first() -> None:
    knowledge = open_knowledge("memory://")
    remember = remember_tool(knowledge, clock=uw.ManualClock(T0))
    info = uw.CallInfo("run-1:0:write:0", "acme", "run-1", "write", 0)
    first = asyncio.run(remember.invoke({"text": "first attempt"}, info))
    again = asyncio.run(remember.invoke({"text": "second attempt"}, info))
    assert again == first
    hits = knowledge.search("acme", "attempt", roles=(), now=T0)
    assert [(h.record.id, h.record.text) for h in hits] == [("run-1:0:write:0", "first attempt")]
    assert remember.mutating and remember.idempotent
    assert not recall_tool(knowledge).mutating


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda kb: recall_tool(kb, max_sensitivity="secret"), "sensitivity"),
        (lambda kb: remember_tool(kb, sensitivity="top"), "sensitivity"),
        (lambda kb: remember_tool(kb, roles="support"), "roles"),
        (lambda kb: remember_tool(kb, retention=0), "retention"),
    ],
)
def test_tool_options_are_checked_when_the_tool_is_made(make: Any, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        make(open_knowledge("memory://"))
