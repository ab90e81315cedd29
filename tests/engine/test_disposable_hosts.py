"""Disposable by mail host (PRODUCT.md row 3, issue 25): a domain no list names yet, whose MX
hosts are those of a known disposable service, is disposable, over real DNS to the sandbox.
The hosts come from the shipped list (``engine/data/disposable_mx_hosts.txt``), the user's
``disposable_mx.txt``, and the MX answers of listed disposable domains seen by the engine.
"""

from pathlib import Path

from listhygiene.engine import Engine, EngineSettings
from listhygiene.results import VerificationResult
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import Reason, Status
from tests.conftest import engine_defaults, sandbox_settings

WORLD = {
    "domains": {
        # two listed disposable domains (disposable-email-domains) on their service's mail host
        "mailinator.com": {"mx": [{"preference": 10, "host": "mx.throwaway-service.test"}]},
        "sharklasers.com": {"mx": [{"preference": 10, "host": "mx.throwaway-service.test"}]},
        # one listed disposable domain on a shared web host's MX, beside an ordinary domain
        "trashmail.com": {"mx": [{"preference": 10, "host": "mx.shared-hosting.test"}]},
        "bakery.test": {"mx": [{"preference": 10, "host": "mx.shared-hosting.test"}]},
        # a new throwaway domain on the same host: no list names it
        "brand-new-throwaway.test": {
            "mx": [{"preference": 10, "host": "mx.throwaway-service.test"}]
        },
        # a new domain on a host of the shipped list (YOPmail's)
        "yop-alias.test": {"mx": [{"preference": 10, "host": "smtp.yopmail.com"}]},
        # one disposable host and one ordinary host: not disposable by host
        "mixed.test": {
            "mx": [
                {"preference": 10, "host": "smtp.yopmail.com"},
                {"preference": 20, "host": "mx.ordinary.test"},
            ],
            "mailboxes": ["ann"],
        },
        # a host only the user's own list names
        "users-own.test": {"mx": [{"preference": 10, "host": "mx.their-temp.test"}]},
        "ordinary.test": {
            "mx": [{"preference": 10, "host": "mx.ordinary.test"}],
            "mailboxes": ["ann"],
        },
    },
    "hosts": {
        "mx.throwaway-service.test": {},
        "smtp.yopmail.com": {},
        "mx.ordinary.test": {},
        "mx.their-temp.test": {},
        "mx.shared-hosting.test": {},
    },
}
# throwaway services accept any local part
for _name in (
    "mailinator.com",
    "sharklasers.com",
    "trashmail.com",
    "bakery.test",
    "brand-new-throwaway.test",
    "yop-alias.test",
    "users-own.test",
):
    WORLD["domains"][_name]["catch_all"] = True  # type: ignore[index]

#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


def settings(sandbox: Sandbox, **changes: object) -> EngineSettings:
    return sandbox_settings(sandbox, **(engine_defaults("dns_timeout") | changes))


async def verify(engine: Engine, address: str) -> VerificationResult:
    return await engine.verify(address)


async def test_a_new_domain_on_a_listed_disposable_domains_host_is_disposable(
    sandbox: Sandbox,
) -> None:
    engine = Engine(settings(sandbox))
    before = await verify(engine, "anyone@brand-new-throwaway.test")
    assert before.status is Status.CATCHALL  # nothing has shown its host to be a throwaway's
    listed = await verify(engine, "someone@mailinator.com")
    assert listed.status is Status.DISPOSABLE
    # one listed domain on a host is not enough to call the host a throwaway service's
    assert (await verify(engine, "anyone@brand-new-throwaway.test")).status is Status.CATCHALL
    assert (await verify(engine, "x@sharklasers.com")).status is Status.DISPOSABLE
    after = await verify(engine, "anyone@brand-new-throwaway.test")
    assert (after.status, after.reason) == (Status.DISPOSABLE, Reason.DISPOSABLE_DOMAIN)
    assert after.is_disposable
    assert not after.is_free


async def test_one_listed_domain_on_a_shared_host_teaches_nothing(sandbox: Sandbox) -> None:
    engine = Engine(settings(sandbox))
    assert (await verify(engine, "a@trashmail.com")).status is Status.DISPOSABLE
    bakery = await verify(engine, "orders@bakery.test")
    assert bakery.status is Status.CATCHALL
    assert not bakery.is_disposable


async def test_a_host_of_the_shipped_list_makes_a_new_domain_disposable(sandbox: Sandbox) -> None:
    engine = Engine(settings(sandbox))
    result = await verify(engine, "x@yop-alias.test")
    assert (result.status, result.reason) == (Status.DISPOSABLE, Reason.DISPOSABLE_DOMAIN)
    mixed = await verify(engine, "ann@mixed.test")
    assert not mixed.is_disposable
    ordinary = await verify(engine, "ann@ordinary.test")
    assert ordinary.status is Status.VALID
    assert not ordinary.is_disposable


async def test_a_whole_column_learns_before_it_decides(sandbox: Sandbox) -> None:
    """The pipeline's path without SMTP looks up every domain of a batch first, then decides:
    a new throwaway domain is disposable whatever its place beside the listed one."""
    import pyarrow as pa

    from listhygiene.engine.bulk import verify_column_without_smtp

    engine = Engine(settings(sandbox, check_smtp=False))
    column = pa.array(
        ["a@brand-new-throwaway.test", "b@mailinator.com", "c@yop-alias.test", "d@sharklasers.com"]
    )
    table = await verify_column_without_smtp(engine, column)
    assert table.column("status").to_pylist() == ["disposable"] * 4


async def test_the_users_list_of_disposable_hosts(sandbox: Sandbox, tmp_path: Path) -> None:
    (tmp_path / "disposable_mx.txt").write_text("mx.their-temp.test\n-smtp.yopmail.com\n")
    engine = Engine(settings(sandbox, lists_dir=str(tmp_path)))
    own = await verify(engine, "z@users-own.test")
    assert own.status is Status.DISPOSABLE
    taken_out = await verify(engine, "z@yop-alias.test")
    assert taken_out.status is Status.CATCHALL


def test_the_verdict_store_keeps_what_a_run_learnt(sandbox: Sandbox, tmp_path: Path) -> None:
    """A run that saw two listed disposable domains on one mail host keeps that in the verdict
    store; the next run, whose list has only a new throwaway domain on that host, calls it
    disposable from its first address."""
    import listhygiene

    settings_ = settings(sandbox)
    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    first = tmp_path / "first.csv"
    first.write_text("email\na@mailinator.com\nb@sharklasers.com\n")
    listhygiene.clean(first, tmp_path / "out1", settings=settings_, verdicts=store)
    second = tmp_path / "second.csv"
    second.write_text("email\nc@brand-new-throwaway.test\n")
    run = listhygiene.clean(second, tmp_path / "out2", settings=settings_, verdicts=store)
    assert run.summary["rows"]["by_status"]["disposable"] == 1
    without = listhygiene.clean(second, tmp_path / "out3", settings=settings_, verdicts="none")
    assert without.summary["rows"]["by_status"]["catchall"] == 1
