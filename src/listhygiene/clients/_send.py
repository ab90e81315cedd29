"""The only I/O of the clients: send what ``_core`` builds, sleep as long as it says.

:class:`SyncBase` and :class:`AsyncBase` own the httpx client and the loop; the form clients add
one thin method per endpoint.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from listhygiene.clients._config import ClientSettings
from listhygiene.clients._core import Call, ClientCore, Done, Fail

__all__ = ["AsyncBase", "SyncBase"]

T = TypeVar("T")


class SyncBase:
    """A blocking client of one form; a context manager that closes its connections."""

    _form = ""

    def __init__(
        self,
        settings: ClientSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        **core_options: Any,
    ) -> None:
        self.settings = settings
        self._core = ClientCore(self._form, settings, clock=clock, **core_options)
        self._http = httpx.Client(**settings.httpx_options())
        self._sleep = sleep
        self._clock = clock

    def _send(self, call: Call[T]) -> T:
        exchange = self._core.exchange(call)
        while True:
            while (wait := exchange.before_send()) > 0:
                self._sleep(wait)
            request = exchange.request(self._http)
            try:
                response = self._http.send(request)
            except httpx.RequestError as exc:
                outcome = exchange.on_transport_error(exc)
            else:
                outcome = exchange.on_response(response)
            if isinstance(outcome, Done):
                return outcome.value
            if isinstance(outcome, Fail):
                raise outcome.error from outcome.cause
            self._sleep(outcome.wait)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncBase:
    """An asyncio client of one form; an async context manager that closes its connections."""

    _form = ""

    def __init__(
        self,
        settings: ClientSettings,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        **core_options: Any,
    ) -> None:
        self.settings = settings
        self._core = ClientCore(self._form, settings, clock=clock, **core_options)
        self._http = httpx.AsyncClient(**settings.httpx_options())
        self._sleep = sleep
        self._clock = clock

    async def _send(self, call: Call[T]) -> T:
        exchange = self._core.exchange(call)
        while True:
            while (wait := exchange.before_send()) > 0:
                await self._sleep(wait)
            request = exchange.request(self._http)
            try:
                response = await self._http.send(request)
            except httpx.RequestError as exc:
                outcome = exchange.on_transport_error(exc)
            else:
                outcome = exchange.on_response(response)
            if isinstance(outcome, Done):
                return outcome.value
            if isinstance(outcome, Fail):
                raise outcome.error from outcome.cause
            await self._sleep(outcome.wait)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
