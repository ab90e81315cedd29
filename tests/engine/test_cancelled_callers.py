"""Callers of one engine share its DNS lookups and a domain's probing; one of them being
cancelled (a client gone, a request's time limit: the service does this) must not take the
verdicts of the others. It did: the first caller owned the shared lookup, its cancellation was
handed to every waiter, and their runs ended without a result (the service answered 500)."""

import asyncio

import pytest

from listhygiene.engine import Engine
from listhygiene.sandbox import Sandbox

WORLD = {
    "domains": {
        "slow-dns.test": {
            "mx": [{"preference": 10, "host": "mx.slow-dns.test"}],
            "mailboxes": ["ann", "bob", "cid", "dee"],
            "dns_latency_ms": 600,
        },
        "slow-smtp.test": {
            "mx": [{"preference": 10, "host": "mx.slow-smtp.test"}],
            "mailboxes": ["eve", "fay", "gus", "hal"],
        },
    },
    "hosts": {"mx.slow-dns.test": {}, "mx.slow-smtp.test": {"latency_ms": 300}},
}


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


def engine(sandbox: Sandbox) -> Engine:
    return Engine(
        sandbox.engine_settings(
            helo="verifier.test",
            retry_delays=(),
        )
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("domain", "check_smtp", "locals_"),
    [("slow-dns.test", False, "ann bob cid dee"), ("slow-smtp.test", True, "eve fay gus hal")],
)
async def test_a_cancelled_caller_leaves_the_others_their_verdicts(
    sandbox: Sandbox, domain: str, check_smtp: bool, locals_: str
) -> None:
    shared = engine(sandbox)

    async def verify(address: str) -> list[tuple[str, str]]:
        results = shared.verify_each([address], check_smtp=check_smtp)
        return [(str(given), result.status.value) async for given, result in results]

    first, *rest = [f"{local}@{domain}" for local in locals_.split()]
    victim = asyncio.ensure_future(verify(first))
    await asyncio.sleep(0.1)  # its lookup (or session) is under way
    others = [asyncio.ensure_future(verify(a)) for a in rest]
    await asyncio.sleep(0.1)
    victim.cancel()
    answers = await asyncio.gather(*others)
    assert answers == [[(a, "valid")] for a in rest]
    # and the engine still answers the cancelled caller's address afterwards
    assert await verify(first) == [(first, "valid")]
