"""Model calls: what ``ctx.model`` does. A call journaled before returns its journaled
response; a new one passes the budgets, is asked (streamed when the step wants it) and its
reply is journaled once, as ``ModelResponded``."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any, NoReturn, cast

from .. import events as ev
from ..effects import Model, ModelReply, StreamingModel, idempotency_key
from ..events import JSON
from ..guard.budgets import Usage
from . import _budgets as budgets
from ._activation import Activation
from ._stops import DeadLetter, Suspend, unswallowed
from ._streaming import LiveStream


class ModelCalls:
    """The model calls of a step's execution (a part of
    :class:`~underway.engine.StepExecution`)."""

    _act: Activation
    _calls: int
    run_id: str
    tenant_id: str
    step: str
    ordinal: int
    broken: BaseException | None
    _record: Callable[[int, str, str], Any]

    @unswallowed
    async def model(self, model: Model, request: JSON, *, stream: bool = False) -> JSON:
        """Ask ``model``, or return the response journaled for this call.

        Args:
            model: The adapter.
            request: The request, as JSON.
            stream: Ask with ``model.stream`` (when it has one) and forward its deltas to
                the run's live stream. A journaled call streams nothing.
        """
        index = self._calls
        self._calls += 1
        rec = self._record(index, "model", "")
        if rec is not None and rec.status == "succeeded":
            return rec.result
        key = idempotency_key(self.run_id, self.step, index, ordinal=self.ordinal)
        svc = self._act.services
        flow = svc.flow(self._act.state.flow)
        held = False
        if svc.guard.has_budget(flow):
            pending, unpriced = budgets.model_pending(model, request)
            await budgets.settled_first(self._act)
            over = await svc.guard.over_budget(
                flow, svc.store, self._act.state, key, pending, svc.clock.now(),
                unpriced=unpriced, in_flight=budgets.in_flight(self._act),
            )
            if over is not None:
                budgets.over_budget(self._act, self.step, over[0], over[1], None)
            budgets.admitted(self._act, key, index, pending)
            held = svc.guard.budget_of_tenant(self.tenant_id) is not None
        live = LiveStream(self._act, key=key, step=self.step, index=index) \
            if stream and hasattr(model, "stream") else None
        try:
            budgets.check_route_budget(self._act, model, request)
            began = time.perf_counter()
            try:
                reply = await self._ask(model, request, live)
            except Exception as exc:
                if not getattr(exc, "retryable", False):
                    raise
                self._retry_model(key, index, rec, exc)
        except BaseException as exc:
            if held:
                budgets.unanswered(self._act, key, exc)
            raise
        self._act.buffer(ev.ModelResponded(
            key=key, index=index, model=reply.model, request=request, response=reply.response,
            tokens_in=reply.tokens_in, tokens_out=reply.tokens_out, cost_usd=reply.cost_usd,
            latency_ms=(time.perf_counter() - began) * 1000, **svc.registry.hidden.declared(),
        ))
        if held:
            budgets.settle_later(self._act, key, Usage(
                tokens_in=reply.tokens_in, tokens_out=reply.tokens_out,
                cost_usd=reply.cost_usd, model_calls=1))
        await self._act.commit()
        if live is not None:
            await live.finish()
        return reply.response

    @staticmethod
    async def _ask(model: Model, request: JSON, live: LiveStream | None) -> ModelReply:
        """The model's reply: streamed through ``live`` when given, every delta written
        before the reply is returned (and so before it is journaled)."""
        if live is None:
            return await model.complete(request)
        live.open()
        try:
            reply = await cast(StreamingModel, model).stream(request, live.emit)
        except asyncio.CancelledError:
            live.abandon()
            raise
        finally:
            await live.flush()
        return reply

    def _retry_model(self, key: str, index: int, rec: Any, exc: Exception) -> NoReturn:
        """A provider's transient failure (rate limit, outage) that outlasted the adapter's
        own retries: wait on a durable timer, holding no worker, then ask again."""
        s, svc = self._act.state, self._act.services
        attempt = (rec.attempts if rec is not None else 1) + 1
        if svc.retry_budget is not None and s.retries >= svc.retry_budget:
            raise DeadLetter(
                f"retry budget of {svc.retry_budget} retries per run is exhausted; last: "
                f"model call failed with {type(exc).__name__}: {exc}", "RetryBudgetExhausted",
            )
        hinted = getattr(exc, "retry_after", None)
        delay = (float(hinted) if hinted
                 else min(600.0, 2.0 ** attempt) * (0.5 + random.random() / 2))
        timer = f"retry-{s.seq + 1}"
        self._act.buffer(ev.RetryScheduled(
            key=key, tool="model", index=index, attempt=attempt, timer_id=timer, delay_s=delay,
        ))
        self._act.buffer(ev.TimerSet(timer_id=timer, wake_at=svc.clock.now() + delay))
        raise Suspend
