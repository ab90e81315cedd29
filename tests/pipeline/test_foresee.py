"""A run that reuses stored verdicts tells the backend, batch by batch, which addresses are left
to verify, and the local engine looks up their domains at once (docs/pipeline.md, "Nightly
reruns"): the same questions verification asks, so it asks none again, and none more are asked
than a run of those addresses alone asks."""

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest

import listhygiene
from listhygiene.pipeline.backends.local import LocalBackend
from listhygiene.sandbox import Sandbox
from tests.conftest import write_contacts


def _mx(host: str) -> list[dict[str, object]]:
    return [{"preference": 10, "host": host}]


SANDBOX_WORLD = {
    "domains": {
        "good.test": {"mx": _mx("mx.good.test"), "mailboxes": ["a", "b", "c"]},
        "other.test": {"mx": _mx("mx.other.test"), "mailboxes": ["d"]},
        "nullmx.test": {"null_mx": True},
    },
    "hosts": {"mx.good.test": {}, "mx.other.test": {}},
}


class _Recording(LocalBackend):
    """The local engine, keeping what it was told to foresee."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.foreseen: list[str] = []

    def foresee(self, addresses: pa.Array) -> None:
        self.foreseen += addresses.to_pylist()
        super().foresee(addresses)


def test_the_backend_is_told_only_the_addresses_the_store_did_not_answer(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    settings = sandbox.engine_settings(dns_timeout=1.0)
    known = "Email\na@good.test\nb@good.test\nx@nullmx.test\nnot an address\n"
    first = _Recording(settings)
    listhygiene.clean(
        write_contacts(tmp_path, known),
        tmp_path / "first",
        backend=first,
        check_smtp=False,
        verdicts=store,
    )
    # an empty store answers nothing: everything is foreseen
    assert sorted(first.foreseen) == sorted(
        ["a@good.test", "b@good.test", "x@nullmx.test", "not an address"]
    )

    nightly = tmp_path / "nightly"
    nightly.mkdir()
    source = write_contacts(nightly, known + "c@good.test\nd@other.test\n")
    queries = sandbox.dns_queries
    second = _Recording(settings)
    result = listhygiene.clean(
        source, tmp_path / "second", backend=second, check_smtp=False, verdicts=store
    )
    assert result.summary["verdicts"]["reused"] == 4
    assert sorted(second.foreseen) == ["c@good.test", "d@other.test"]
    asked = sandbox.dns_queries - queries

    # no question twice: as many as a run of the two new addresses alone, without a store
    alone = tmp_path / "alone"
    alone.mkdir()
    queries = sandbox.dns_queries
    listhygiene.clean(
        write_contacts(alone, "Email\nc@good.test\nd@other.test\n"),
        tmp_path / "alone-out",
        backend=LocalBackend(settings),
        check_smtp=False,
        verdicts="none",
    )
    assert asked == sandbox.dns_queries - queries


@pytest.mark.parametrize("check_smtp", [False, True])
def test_what_the_engine_foresees_is_what_verification_asks(
    sandbox: Sandbox, check_smtp: bool
) -> None:
    addresses = pa.array(["a@good.test", "d@other.test", "x@nullmx.test", "not an address"])

    async def main() -> tuple[int, int]:
        backend = LocalBackend(sandbox.engine_settings(dns_timeout=1.0))
        try:
            before = sandbox.dns_queries
            backend.foresee(addresses)
            domains = ("good.test", "other.test", "nullmx.test")

            def looked_up() -> bool:  # the engine's resolver is made on first use
                resolver = backend.engine._resolver
                return resolver is not None and all(resolver.known(d) for d in domains)

            async def until_looked_up() -> None:
                while not looked_up():  # noqa: ASYNC110 - the engine offers no event for it
                    await asyncio.sleep(0.01)

            await asyncio.wait_for(until_looked_up(), 30)  # a hang guard: it fails, not waits
            foreseen = sandbox.dns_queries - before
            job = await backend.submit(addresses, check_smtp=check_smtp)
            async for _ in backend.results(job):
                pass
            return foreseen, sandbox.dns_queries - before - foreseen
        finally:
            await backend.aclose()

    foreseen, asked_again = asyncio.run(main())
    assert foreseen > 0
    assert asked_again == 0
