"""A worker of a fleet killed in the middle of a session (issue 26, PRODUCT.md "Fleet"): its
session slot in the shared store is not given back by the dead process, and comes back by itself
when its lease expires, within 30 s. The worker is a real ``listhygiene verify`` process killed
with SIGKILL; the store is the machine's real Redis or PostgreSQL."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from listhygiene.engine.host_state import LEASE_SECONDS, Budget, HostState, open_host_state
from listhygiene.sandbox import Sandbox
from tests.conftest import empty_redis

#: A mail host that holds every connection two minutes before its banner: a session in progress.
SANDBOX_WORLD = {
    "domains": {"hold.test": {"mx": [{"preference": 10, "host": "mx.hold.test"}]}},
    "hosts": {"mx.hold.test": {"banner_delay_ms": 120_000}},
}


@pytest.fixture(params=["redis", "postgresql"])
def store(request: pytest.FixtureRequest, new_pg_database: Callable[[], str]) -> str:
    if request.param == "postgresql":
        return new_pg_database()
    return empty_redis(10)


@pytest.mark.timeout(180)
async def test_a_killed_workers_slot_comes_back_when_its_lease_expires(
    sandbox: Sandbox, store: str
) -> None:
    env = {
        **os.environ,
        **sandbox.engine_environment(),
        "LISTHYGIENE_SHARED_LIMITS": store,
        "LISTHYGIENE_HOST_CONCURRENCY": "1",
        "LISTHYGIENE_SMTP_TIMEOUT": "300",
    }
    stats = sandbox.stats("mx.hold.test")
    stats.reset()
    worker = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("listhygiene")),
        "verify",
        "someone@hold.test",
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    state: HostState = open_host_state(store)
    host = Budget(f"host:{sandbox.address_of('mx.hold.test')}", concurrency=1, per_second=100)
    try:
        deadline = time.monotonic() + 60
        while stats.active < 1 or await state.holders(host.key) < 1:
            assert worker.returncode is None, "the worker ended before its session began"
            assert time.monotonic() < deadline, "no session began"
            await asyncio.sleep(0.1)
        worker.send_signal(signal.SIGKILL)
        await asyncio.wait_for(worker.wait(), 10)
        # the dead worker gave nothing back: its slot is still held in the store
        assert await state.holders(host.key) == 1
        lease = await asyncio.wait_for(state.acquire([host]), LEASE_SECONDS + 5)
        assert lease.keys == (host.key,)
        await state.release(lease)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
        await state.close()
