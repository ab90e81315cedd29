"""What the client tests share: recorded answers, a scripted service behind ``httpx.MockTransport``,
a fake clock whose sleeps take no time, and a view that runs a sync or an async client alike."""

import asyncio
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from listhygiene.clients import (
    AsyncFormAClient,
    AsyncFormBClient,
    ClientSettings,
    FormAClient,
    FormBClient,
)

RECORDED = Path(__file__).parent / "recorded"
KEY = "test-key-123"
BASE = {"a": "https://api.example.test/a/v1", "b": "https://api.example.test/b/v1"}


def recorded(name: str) -> Any:
    """A recorded body: ``form_a.json`` / ``form_b.json`` entries, or a raw file's bytes."""
    path = RECORDED / name
    return json.loads(path.read_text()) if path.suffix == ".json" else path.read_bytes()


Answer = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


class FakeService:
    """Answers by ``(method, path)`` from scripts; the last answer of a script repeats."""

    def __init__(self) -> None:
        self.scripts: dict[tuple[str, str], list[Answer]] = {}
        self.requests: list[httpx.Request] = []

    def on(self, method: str, path: str, *answers: Answer) -> "FakeService":
        self.scripts[(method, path)] = list(answers)
        return self

    def json(self, method: str, path: str, body: Any, status: int = 200, **kw: Any) -> None:
        self.on(method, path, httpx.Response(status, json=body, **kw))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        script = self.scripts.get((request.method, request.url.path))
        if not script:
            return httpx.Response(599, text=f"unscripted {request.method} {request.url.path}")
        answer = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer) and not isinstance(answer, httpx.Response):
            return answer(request)
        return answer

    def sent(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if (r.method, r.url.path) == (method, path)]


class FakeTime:
    """A monotonic clock that only the client's sleeps move; every sleep is recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


class Both:
    """A sync client, or an async one run on its own event loop, behind one blocking face:
    the same test covers both. Async iterators come back as lists."""

    def __init__(self, client: Any, loop: asyncio.AbstractEventLoop | None) -> None:
        self.client = client
        self.loop = loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if self.loop is None or not callable(method):
            return method

        def run(*args: Any, **kwargs: Any) -> Any:
            out = method(*args, **kwargs)
            if inspect.isasyncgen(out):
                return self.loop.run_until_complete(_collect(out))  # type: ignore[union-attr]
            if inspect.isawaitable(out):
                return self.loop.run_until_complete(out)  # type: ignore[union-attr]
            return out

        return run

    def close(self) -> None:
        if self.loop is None:
            self.client.close()
        else:
            self.loop.run_until_complete(self.client.aclose())
            self.loop.close()


async def _collect(iterator: Any) -> list[Any]:
    return [item async for item in iterator]


CLIENTS = {
    ("a", "sync"): FormAClient,
    ("a", "async"): AsyncFormAClient,
    ("b", "sync"): FormBClient,
    ("b", "async"): AsyncFormBClient,
}


def make_client(
    form: str,
    mode: str,
    handler: Callable[[httpx.Request], httpx.Response],
    time: FakeTime,
    **settings: Any,
) -> Both:
    """A client of ``form`` in ``mode`` ("sync" / "async") on a MockTransport with fake time."""
    options: dict[str, Any] = {"base_url": BASE[form], "api_key": KEY, "max_retries": 3}
    options.update(settings)
    config = ClientSettings(transport=httpx.MockTransport(handler), **options)
    sleep = time.sleep if mode == "sync" else time.asleep
    client = CLIENTS[form, mode](config, sleep=sleep, clock=time.monotonic, jitter=lambda: 1.0)
    return Both(client, None if mode == "sync" else asyncio.new_event_loop())
