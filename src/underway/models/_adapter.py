"""What every provider adapter shares: the Model protocol, retries, pricing."""

from __future__ import annotations

import abc
import asyncio
import json
import logging
import os
import random
import weakref
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any, ClassVar, Self

from ..effects import Emit, ModelQuote, ModelReply
from ..errors import ConfigurationError
from ..events import JSON
from ..retry import RetryPolicy
from .pricing import MaintainedPrice, PriceTable
from .retries import DEFAULT_RETRY, Failure, Retrier, RetryNotice, redactor, sdk_failure
from .types import ModelRequest, ModelResponse

log = logging.getLogger("underway.models")


def api_key(given: str | None, *, env: str, base_url: str | None, adapter: str) -> str:
    """The key to send: ``given``, else ``$env``. A local server (``base_url`` set) may do
    without one; the SDKs insist on some value, so it gets a placeholder."""
    key = given if given is not None else os.environ.get(env)
    if key:
        return key
    if base_url is None:
        raise ConfigurationError(f"{adapter} needs an API key: pass api_key= or set {env}")
    return "unused"


class Adapter(abc.ABC):
    """Base of the provider adapters.

    ``complete`` (the engine's JSON interface) runs over ``send`` (typed), with retries and
    cost accounting; ``stream`` over ``send_streaming`` likewise, emitting deltas.

    Args:
        model: The model id.
        name: The model's name; None means ``provider:model``.
        secret: The API key, kept out of every error.
        sdk: The provider's SDK module; its errors are classified for retries.
        make_client: Makes an SDK client; one is made per event loop.
        prices: Prices calls; None means the maintained table.
        retry: Attempts and back-off; None means the default.
        max_retry_after: The longest provider-requested wait honoured in-process.
        sleep: Waits between retries; injectable for tests.
        jitter: A number in [0, 1) for the back-off; injectable for tests.
        on_retry: Called before each retry.
    """

    provider: ClassVar[str]

    def __init__(
        self,
        model: str,
        *,
        name: str | None,
        secret: str | None,
        sdk: ModuleType,
        make_client: Callable[[], Any],
        prices: PriceTable | None,
        retry: RetryPolicy | None,
        max_retry_after: float,
        sleep: Callable[[float], Awaitable[None]] | None,
        jitter: Callable[[], float] | None,
        on_retry: Callable[[RetryNotice], None] | None,
    ) -> None:
        if not model:
            raise ConfigurationError(f"{type(self).__name__} needs a model id")
        if max_retry_after < 0:
            raise ConfigurationError("max_retry_after must not be negative")
        self.model = model
        self.name = name or f"{self.provider}:{model}"
        self.prices = prices if prices is not None else PriceTable.default()
        self._unpriced: set[str] = set()
        self._make_client = make_client
        # One SDK client per event loop: its pooled connections belong to the loop that
        # opened them, and scripts often drive runs with several asyncio.run() calls.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        status_error, connection_error = sdk.APIStatusError, sdk.APIConnectionError
        self._connection_error: Any = connection_error

        def classify(exc: Exception) -> Failure | None:
            return sdk_failure(exc, status_error=status_error, connection_error=connection_error)

        self._retrier = Retrier(
            provider=self.provider, model=model, policy=retry or DEFAULT_RETRY,
            max_retry_after=max_retry_after, sleep=sleep or asyncio.sleep,
            jitter=jitter or random.random, on_retry=on_retry, classify=classify,
            redact=redactor(secret),
        )

    async def complete(self, request: JSON) -> ModelReply:
        """The engine's entry point: a :class:`ModelRequest` as JSON in, a
        :class:`ModelResponse` as JSON out, with the model id, tokens and cost."""
        response = await self.send(ModelRequest.from_json(request))
        return ModelReply(
            response.to_json(), response.model, response.tokens_in, response.tokens_out,
            response.cost_usd,
        )

    async def send(self, request: ModelRequest) -> ModelResponse:
        """Ask the model directly, outside any flow (nothing is journaled)."""
        params = self.params(request)
        raw, attempts = await self._retrier.run(lambda: self.call(params))
        return self.response(raw, request, attempts)

    async def stream(self, request: JSON, emit: Emit) -> ModelReply:
        """:meth:`complete`, streamed: each text and tool-call delta is emitted as it
        arrives (``ctx.model(..., stream=True)``), and the reply carries the usage and cost
        of the whole answer."""
        response = await self.send_streaming(ModelRequest.from_json(request), emit)
        return ModelReply(
            response.to_json(), response.model, response.tokens_in, response.tokens_out,
            response.cost_usd,
        )

    async def send_streaming(self, request: ModelRequest, emit: Emit) -> ModelResponse:
        """Ask the model directly with streaming, outside any flow: ``emit`` gets each
        delta. When a retry follows an attempt that emitted deltas, ``emit`` gets
        ``{"type": "restart"}`` first: what came before it is abandoned.

        Args:
            request: The request.
            emit: Called with each delta.
        """
        params = self.params(request)
        emitted = False

        async def forward(delta: JSON) -> None:
            nonlocal emitted
            emitted = True
            await emit(delta)

        async def attempt() -> Any:
            nonlocal emitted
            if emitted:
                emitted = False
                await emit({"type": "restart"})
            return await self.call_stream(params, forward)

        raw, attempts = await self._retrier.run(attempt)
        return self.response(raw, request, attempts)

    def client(self) -> Any:
        """The SDK client for the running event loop."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = self._make_client()
        return client

    async def aclose(self) -> None:
        """Close the connections this adapter opened in the running event loop."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @abc.abstractmethod
    def params(self, request: ModelRequest) -> dict[str, Any]:
        """The SDK call's keyword arguments for ``request``."""

    @abc.abstractmethod
    async def call(self, params: dict[str, Any]) -> Any:
        """One request to the provider."""

    def lost(self, exc: Exception) -> Exception:
        """A transport failure in the middle of a streamed answer, as the SDK's connection
        error: retried like a connection lost before the answer began."""
        try:
            request = exc.request  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):
            return exc
        lost: Exception = self._connection_error(message=f"stream cut: {exc}", request=request)
        lost.__cause__ = exc
        return lost

    @abc.abstractmethod
    async def call_stream(self, params: dict[str, Any], emit: Emit) -> Any:
        """One streamed request: emits each delta, returns what :meth:`call` would."""

    @abc.abstractmethod
    def response(self, raw: Any, request: ModelRequest, attempts: int) -> ModelResponse:
        """The provider's reply as a :class:`ModelResponse`.

        Args:
            raw: The reply, as the SDK gives it.
            request: The request it answers.
            attempts: How many requests were sent.
        """

    def quote(self, request: JSON) -> ModelQuote:
        """The most ``request`` can spend: its parameters' bytes bound its input tokens
        (a token is at least a byte), and ``max_tokens`` (else the model's context
        window) its output, priced at the dearest rate that applies to that many tokens."""
        req = ModelRequest.from_json(request)
        tokens_in = len(json.dumps(self.params(req), default=str).encode())
        price = self.prices.lookup(self.model, provider=self.provider)
        out = self.max_output(req)
        if out is None and isinstance(price, MaintainedPrice):
            out = price.context_window
        if out is None:
            return ModelQuote(None, None, f"a request to {self.name} sets no max_tokens, so "
                                          "its output and cost have no bound; set max_tokens")
        cost = self.prices.most(self.model, tokens_in, out, provider=self.provider)
        if cost is None:
            return ModelQuote(tokens_in + out, None,
                              f"model {self.model!r} has no price in the price table or "
                              "genai-prices; give it one in the prices TOML")
        return ModelQuote(tokens_in + out, cost)

    def max_output(self, request: ModelRequest) -> int | None:
        """The most output tokens ``request`` allows (None: no bound of the adapter's)."""
        return request.max_tokens

    def cost(
        self, model: str, tokens_in: int, tokens_out: int, cached_tokens_in: int,
        cache_write_tokens_in: int = 0,
    ) -> float:
        """USD for one call, priced by the model that answered, else the one asked for.

        A model with no price costs 0 and is logged once. A call to it is refused before it is
        sent wherever a cost budget applies (:meth:`quote`). Give local models an explicit 0
        price.

        Args:
            model: The model that answered.
            tokens_in: Every input token, cache reads and writes included.
            tokens_out: Output tokens.
            cached_tokens_in: The part of ``tokens_in`` read from the prompt cache.
            cache_write_tokens_in: The part of ``tokens_in`` written to the prompt cache.
        """
        for candidate in (model, self.model):
            usd = self.prices.cost(candidate, tokens_in, tokens_out, cached_tokens_in,
                                   cache_write_tokens_in, provider=self.provider)
            if usd is not None:
                return usd
        if model not in self._unpriced:
            self._unpriced.add(model)
            log.warning(
                "%s: no price for model %r in the price table; its calls are counted as $0",
                self.name, model,
            )
        return 0.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r})"
