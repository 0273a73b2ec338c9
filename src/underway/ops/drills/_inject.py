"""Fault injection inside a drill's worker process: each tool instrumented (every effect
executed is logged; a slow dependency; expired credentials handed to a call), a secret
provider, and the :mod:`underway.http` interceptor that answers for a service (a
refused credential, a partial answer).

Each fault is injected at most once per call (idempotency key), so the retry a flow
makes after it meets the world as it is; both logs are shared by the drill's processes
and written before the process can be killed past them."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from ...effects import CallInfo, Tool
from ...http import Send
from ...secrets import SecretProvider
from ._plan import EXPIRED, Fault, Plan, draw

PARTIAL_KINDS = ("truncated", "missing_field", "error_body")
"""How a partial answer is broken: cut in half, a top-level field dropped, or an error
body sent with the success status."""
ERROR_BODY = {"error": {"code": "internal_error",
                        "message": "the service could not process the request"}}
SHARE = 0.25
"""The share of a run's calls a fault is injected into besides the first call of each
tool, which always gets it."""
_tool: contextvars.ContextVar[str] = contextvars.ContextVar("drilled_tool", default="")
"""The tool whose call is running (a request through underway.http knows only its key)."""


class Logbook:
    """An append-only log of JSON lines shared by processes; a line is on disk (fsync)
    before :meth:`append` returns."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: dict[str, Any]) -> None:
        """Add ``record`` durably."""
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        """Every record so far (a line cut short by a kill is skipped)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


class DrillSecrets:
    """The drill's secret provider: the values of ``inner`` (the worker's own provider),
    or made-up ones when there is none. Which calls get them expired is the injector's
    choice (:meth:`Injector.credentials`)."""

    def __init__(self, inner: SecretProvider | None) -> None:
        self.inner = inner
        self.refreshed: list[str] = []

    def get(self, name: str) -> str:
        """The secret's value."""
        return self.inner.get(name) if self.inner is not None else f"drill-{name.lower()}"

    def refresh(self, name: str) -> None:
        """Note the refresh (the values handed out are always current)."""
        self.refreshed.append(name)


class Injector:
    """The faults of one drill, applied in one worker process."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.executions = Logbook(plan.executions)
        self.injections = Logbook(plan.injections)
        self._seen: set[tuple[str, str]] = set()
        self._instrumented: set[int] = set()

    def fault_of(self, run_id: str) -> Fault | None:
        """The fault injected into ``run_id``, if any."""
        return self.plan.faults.get(run_id)

    def _note(self, fault: Fault, info: CallInfo, tool: str, action: str,
              **detail: Any) -> None:
        self.injections.append({"fault": fault, "run": info.run_id, "key": info.key,
                                "step": info.step, "tool": tool, "action": action,
                                **detail})

    def _injected(self, fault: Fault, where: str) -> bool:
        """True once ``fault`` was injected at ``where`` (a key, or a run's tool) by any
        process."""
        if (fault, where) in self._seen:
            return True
        for r in self.injections.read():
            if r.get("fault") == fault and r.get("action") in ("expired", "corrupted",
                                                                 "delayed"):
                self._seen.update({(fault, r["key"]), (fault, f"{r['run']}/{r['tool']}")})
        return (fault, where) in self._seen

    def _pick(self, fault: Fault, info: CallInfo, tool: str) -> bool:
        """Inject ``fault`` into this call? Once per key: into the first call of each
        tool in the run, and a seeded share of the others."""
        if self.fault_of(info.run_id) != fault or self._injected(fault, info.key):
            return False
        first = not self._injected(fault, f"{info.run_id}/{tool}")
        chosen = first or draw(self.plan.seed, fault, info.key) < SHARE
        if chosen:
            self._seen.update({(fault, info.key), (fault, f"{info.run_id}/{tool}")})
        return chosen

    # -- tools ----------------------------------------------------------------------------

    def instrument(self, tools: Iterable[Tool]) -> None:
        """Instrument each tool in place (the flows hold these very objects)."""
        for t in tools:
            if id(t) not in self._instrumented:
                self._instrumented.add(id(t))
                self._instrument(t)

    def _instrument(self, t: Tool) -> None:
        fn, wants, takes = t.fn, t.wants_call_info, t.takes_args
        if "slow" in self.plan.faults.values():
            object.__setattr__(t, "timeout", min(t.timeout, self.plan.timeout_cap))

        def args(value: Any, info: CallInfo) -> tuple[Any, ...]:
            return (value, info) if wants else (value,) if takes else ()

        if inspect.iscoroutinefunction(fn):
            async def drilled(value: Any, info: CallInfo) -> Any:
                _tool.set(t.name)
                out = await fn(*args(value, self.credentials(t, info)))
                self.executed(t, info)
                delay = self.delay(t, info)
                if delay:
                    await asyncio.sleep(delay)
                return out
            object.__setattr__(t, "fn", drilled)
        else:
            def drilled_sync(value: Any, info: CallInfo) -> Any:
                _tool.set(t.name)
                out = fn(*args(value, self.credentials(t, info)))
                self.executed(t, info)
                delay = self.delay(t, info)
                if delay:
                    time.sleep(delay)
                return out
            object.__setattr__(t, "fn", drilled_sync)
        object.__setattr__(t, "wants_call_info", True)

    def executed(self, t: Tool, info: CallInfo) -> None:
        """Log an effect that ran to its end (read-only calls are not effects)."""
        if t.mutating:
            self.executions.append({"run": info.run_id, "key": info.key, "tool": t.name,
                                    "idempotent": t.idempotent, "pid": os.getpid()})

    def credentials(self, t: Tool, info: CallInfo) -> CallInfo:
        """``info`` with expired credentials, for a call chosen for that fault."""
        if not info.secrets or not self._pick("credentials", info, t.name):
            return info
        self._note("credentials", info, t.name, "expired", secrets=sorted(info.secrets))
        return dataclasses.replace(
            info, secrets={name: value + EXPIRED for name, value in info.secrets.items()})

    def delay(self, t: Tool, info: CallInfo) -> float:
        """Seconds the dependency takes to answer after the effect: past the timeout for
        a call chosen for the ``slow`` fault, else 0."""
        if not self._pick("slow", info, t.name):
            return 0.0
        seconds = t.timeout + 1.0
        self._note("slow", info, t.name, "delayed", seconds=seconds, timeout=t.timeout)
        return seconds

    # -- the services behind underway.http ------------------------------------------------

    async def intercept(self, req: httpx.Request, info: CallInfo, send: Send
                        ) -> httpx.Response:
        """Answer ``req`` for the service as the call's fault says."""
        fault = self.fault_of(info.run_id)
        tool = _tool.get()
        if fault == "credentials":
            if EXPIRED in _request_text(req):
                self._note("credentials", info, tool, "rejected", url=_where(req))
                return httpx.Response(401, json={"error": "the credentials have expired"},
                                      request=req)
            resp = await send(req)
            self._note("credentials", info, tool, "forwarded", status=resp.status_code)
            return resp
        resp = await send(req)
        if fault != "partial" or not 200 <= resp.status_code < 300:
            return resp
        if "json" not in resp.headers.get("content-type", "") or not self._pick(
                "partial", info, tool):
            return resp
        kind = PARTIAL_KINDS[int(draw(self.plan.seed, "partial-kind", info.key) * 3)]
        body, kind = _broken(resp.content, kind, draw(self.plan.seed, "field", info.key))
        self._note("partial", info, tool, "corrupted", kind=kind, method=req.method,
                   url=_where(req), whole=_json_or_none(resp.content))
        return httpx.Response(resp.status_code, content=body, request=req,
                              headers={"content-type": "application/json"})


def _json_or_none(content: bytes) -> Any:
    """The whole answer as JSON (None: it is not), so the report can tell a later
    attempt's whole answer from the broken one."""
    try:
        return json.loads(content)
    except ValueError:
        return None


def _broken(content: bytes, kind: str, choice: float) -> tuple[bytes, str]:
    """``content`` broken as ``kind`` says (a body with no field to drop is truncated)."""
    if kind == "error_body":
        return json.dumps(ERROR_BODY).encode(), kind
    if kind == "missing_field":
        try:
            doc = json.loads(content)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and doc:
            keys = sorted(doc)
            del doc[keys[int(choice * len(keys))]]
            return json.dumps(doc).encode(), kind
    return content[: max(1, len(content) // 2)], "truncated"


def _request_text(req: httpx.Request) -> str:
    body = req.content.decode("utf-8", errors="replace") if req.content else ""
    return " ".join([str(req.url), *req.headers.values(), body])


def _where(req: httpx.Request) -> str:
    return f"{req.method} {req.url.scheme}://{req.url.host}{req.url.path}"
