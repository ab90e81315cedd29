"""``listhygiene doctor`` (issue 29, item 2; docs/engine.md, "Doctor: auditing this machine"):
each check against the sandbox's real DNS (its reverse zone, a DNSBL zone, a lying resolver) and
real SMTP on loopback, and the command as a user runs it, in a subprocess.

The machine's address in these worlds is 127.0.0.1: the local address of a connection to a
sandbox mail host (127.1.0.x) on Linux."""

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from listhygiene.engine.doctor import DoctorReport, Status, doctor
from listhygiene.sandbox import Sandbox
from tests.conftest import sandbox_settings

ME = "127.0.0.1"
HELO = "verifier.test"
ZONE = "bl.sandbox.test"
GMAIL_MX = "gmail-smtp-in.l.google.com"


def world(**changes: Any) -> dict[str, Any]:
    """A machine with everything right: Gmail's mail host listens, 127.0.0.1's PTR is the HELO
    name, which resolves back to it, and the DNSBL lists another address. ``changes`` replace
    top-level fields."""
    return {
        "domains": {
            "gmail.com": {"mx": [{"preference": 5, "host": GMAIL_MX}]},
            HELO: {"a": [ME]},
            "elsewhere.test": {"a": ["127.0.0.9"]},
        },
        "hosts": {GMAIL_MX: {}},
        "ptr": {ME: HELO},
        "dnsbl": {ZONE: ["127.0.0.9"]},
        **changes,
    }


MakeSandbox = Callable[..., Sandbox]


def cli(sandbox: Sandbox, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``listhygiene doctor ARGS`` in a subprocess, pointed at ``sandbox``."""
    environment = {
        **os.environ,
        **sandbox.engine_environment(),
        "LISTHYGIENE_HELO": HELO,
        "LISTHYGIENE_DNSBL_ZONES": ZONE,
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", "doctor", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
    )


async def check(sandbox: Sandbox, **changes: Any) -> DoctorReport:
    options = {k: changes.pop(k) for k in ("address", "domains") if k in changes}
    settings = sandbox_settings(sandbox, **({"helo": HELO, "dnsbl_zones": (ZONE,)} | changes))
    return await doctor(settings, **options)


def statuses(report: DoctorReport) -> dict[str, Status]:
    return {c.name: c.status for c in report.checks}


# -- the command ---------------------------------------------------------------------------------


def test_all_good_exits_0_with_one_line_per_check(make_mail_sandbox: MakeSandbox) -> None:
    sandbox = make_mail_sandbox(world())
    done = cli(sandbox)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["OK"] * 5
    port, resolver, reverse, helo, dnsbl = lines
    assert f"{GMAIL_MX} ({sandbox.address_of(GMAIL_MX)}) answered" in port
    assert "answers NXDOMAIN" in resolver
    assert f"{ME} has PTR {HELO}, which resolves back to it" in reverse
    assert f"{HELO} resolves to {ME}" in helo
    assert f"{ME} is on none of {ZONE}" in dnsbl
    assert "->" not in done.stdout  # nothing to do
    assert f"this machine's address: {ME} (the local address towards the mail hosts)" in (
        done.stderr
    )


def test_json_is_one_object_with_every_check(make_mail_sandbox: MakeSandbox) -> None:
    sandbox = make_mail_sandbox(world(ptr={}))
    done = cli(sandbox, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert set(report) == {"exit_code", "address", "address_from", "seconds", "checks"}
    assert report["exit_code"] == 1
    assert (report["address"], report["address_from"]) == (ME, "route")
    assert [c["name"] for c in report["checks"]] == [
        "port_25",
        "resolver",
        "reverse_dns",
        "helo",
        "dnsbl",
    ]
    for item in report["checks"]:
        assert set(item) == {"name", "status", "diagnosis", "advice"}
        assert (item["advice"] is None) == (item["status"] == "ok")
    assert {c["name"]: c["status"] for c in report["checks"]}["reverse_dns"] == "fail"


def test_port_25_blocked_exits_6_with_what_to_do(make_mail_sandbox: MakeSandbox) -> None:
    """Nothing answers: one host refuses the connection, the other accepts it and never speaks
    (a firewall that drops, or a middlebox)."""
    blocked = world(
        domains={
            "gmail.com": {"mx": [{"preference": 5, "host": GMAIL_MX}]},
            "outlook.com": {"mx": [{"preference": 10, "host": "outlook-com.olc.protection.test"}]},
            HELO: {"a": [ME]},
        },
        hosts={
            GMAIL_MX: {"behaviour": "refuse"},
            "outlook-com.olc.protection.test": {"behaviour": "silent"},
        },
    )
    sandbox = make_mail_sandbox(blocked)
    done = cli(sandbox)
    assert done.returncode == 6, done.stdout + done.stderr
    port = done.stdout.splitlines()[0]
    assert port.startswith("FAIL  port 25")
    assert f"no mail host answered on port {sandbox.smtp_port}" in port
    assert f"{GMAIL_MX} ({sandbox.address_of(GMAIL_MX)}): connection refused" in port
    assert "no greeting within 2.5 s" in port
    assert "open outbound port 25" in port
    assert "--socks-proxy socks5://HOST:PORT" in port
    # the other checks still ran, and passed
    assert [line.split()[0] for line in done.stdout.splitlines()[1:]] == ["OK"] * 4


def test_missing_ptr_exits_1_saying_to_set_one(make_mail_sandbox: MakeSandbox) -> None:
    done = cli(make_mail_sandbox(world(ptr={})))
    assert done.returncode == 1, done.stdout + done.stderr
    reverse = next(line for line in done.stdout.splitlines() if "reverse DNS" in line)
    assert reverse.startswith("FAIL")
    assert f"{ME} has no PTR record" in reverse
    assert f"set its PTR to a name that resolves back to it, ideally the HELO name {HELO}" in (
        reverse
    )


def test_a_helo_name_that_does_not_resolve_back_exits_1(make_mail_sandbox: MakeSandbox) -> None:
    done = cli(make_mail_sandbox(world()), "--helo", "elsewhere.test")
    assert done.returncode == 1, done.stdout + done.stderr
    helo = next(line for line in done.stdout.splitlines() if "HELO name" in line)
    assert helo.startswith("FAIL")
    assert f"elsewhere.test resolves to 127.0.0.9, not to {ME}" in helo
    assert f"pick a HELO name that resolves to {ME}: --helo NAME" in helo
    assert f"e.g. {HELO}, its PTR name" in helo


def test_a_listed_address_exits_1_naming_the_zone(make_mail_sandbox: MakeSandbox) -> None:
    done = cli(
        make_mail_sandbox(world(dnsbl={ZONE: [ME], "clean.sandbox.test": []})),
        "--dnsbl",
        f"clean.sandbox.test,{ZONE}",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    listed = done.stdout.splitlines()[-1]
    assert listed.startswith("FAIL  blocklists")
    assert f"{ME} is listed on {ZONE}:" in listed
    assert "clean.sandbox.test" not in listed.partition(":")[0]
    assert "ask for delisting" in listed


def test_a_resolver_that_hides_nxdomain_exits_1(make_mail_sandbox: MakeSandbox) -> None:
    done = cli(make_mail_sandbox(world(nxdomain_answer="127.0.0.53")))
    assert done.returncode == 1, done.stdout + done.stderr
    resolver = done.stdout.splitlines()[1]
    assert resolver.startswith("FAIL  resolver")
    assert "with 127.0.0.53 instead of NXDOMAIN" in resolver
    assert "use a resolver that does not rewrite NXDOMAIN" in resolver


# -- the checks, from Python ---------------------------------------------------------------------


async def test_a_ptr_that_does_not_resolve_back_fails(make_mail_sandbox: MakeSandbox) -> None:
    report = await check(make_mail_sandbox(world(ptr={ME: "elsewhere.test"})))
    reverse = report.check("reverse_dns")
    assert reverse.status is Status.FAIL
    assert "has PTR elsewhere.test, which does not resolve back to 127.0.0.1" in reverse.diagnosis
    assert "point elsewhere.test's A record at" in str(reverse.advice)
    assert report.exit_code == 1


async def test_no_dnsbl_configured_is_a_warning_not_a_failure(
    make_mail_sandbox: MakeSandbox,
) -> None:
    report = await check(make_mail_sandbox(world()), dnsbl_zones=())
    assert statuses(report)["dnsbl"] is Status.WARN
    assert report.exit_code == 0


async def test_the_address_a_mail_host_names_is_the_one_checked(
    make_mail_sandbox: MakeSandbox,
    start_socks_proxy: Callable[..., tuple[str, subprocess.Popen[bytes]]],
) -> None:
    """Through a SOCKS proxy whose sessions leave from 127.0.0.7, the mail host names that
    address in its EHLO reply (as Gmail's does): its PTR is checked, not 127.0.0.1's."""
    changed = world(hosts={GMAIL_MX: {"ehlo_names_client": True}}, ptr={"127.0.0.7": "out.test"})
    changed["domains"]["out.test"] = {"a": ["127.0.0.7"]}
    sandbox = make_mail_sandbox(changed)
    url, _ = start_socks_proxy(source="127.0.0.7")
    report = await check(sandbox, socks_proxy=url)
    assert (report.address, report.address_from) == ("127.0.0.7", "ehlo")
    assert f"via proxy {url.removeprefix('socks5://')}" in report.check("port_25").diagnosis
    assert statuses(report)["reverse_dns"] is Status.OK
    assert statuses(report)["helo"] is Status.FAIL  # verifier.test is 127.0.0.1
    assert "e.g. out.test, its PTR name" in str(report.check("helo").advice)
    assert sandbox.stats(GMAIL_MX).connections == 1


async def test_port_25_is_tested_through_the_proxy(
    make_mail_sandbox: MakeSandbox,
    start_socks_proxy: Callable[..., tuple[str, subprocess.Popen[bytes]]],
) -> None:
    sandbox = make_mail_sandbox(world())
    url, proxy = start_socks_proxy()
    proxy.kill()
    proxy.wait(5)
    report = await check(sandbox, socks_proxy=url)
    port = report.check("port_25")
    assert port.status is Status.FAIL
    assert report.exit_code == 6
    assert "(through the SOCKS proxy)" in port.diagnosis
    assert port.advice == "check that the SOCKS proxy runs and may reach port 25"
    assert sandbox.stats(GMAIL_MX).connections == 0  # the host listens: it was not tried direct
    assert (report.address_from, report.address) == ("proxy", "127.0.0.1")


async def test_a_stated_address_is_checked_instead(make_mail_sandbox: MakeSandbox) -> None:
    report = await check(make_mail_sandbox(world()), address="127.0.0.9")
    assert (report.address, report.address_from) == ("127.0.0.9", "option")
    assert statuses(report) == {
        "port_25": Status.OK,
        "resolver": Status.OK,
        "reverse_dns": Status.FAIL,
        "helo": Status.FAIL,
        "dnsbl": Status.FAIL,
    }


async def test_without_mail_hosts_port_25_is_not_called_blocked(
    make_mail_sandbox: MakeSandbox,
) -> None:
    """A resolver that finds no mail host is a failure (1), not a blocked port 25 (6); a private
    address is not looked up, and the checks say how to state the public one."""
    sandbox = make_mail_sandbox(world())
    report = await check(sandbox, allow_private_mx=False, address="10.1.2.3")
    port = report.check("port_25")
    assert port.status is Status.FAIL
    assert port.diagnosis.startswith("not tried")
    assert "gmail.com: no usable mail host" in port.diagnosis
    assert "outlook.com: no usable mail host" in port.diagnosis  # NXDOMAIN
    assert report.exit_code == 1
    for name in ("reverse_dns", "helo", "dnsbl"):
        unchecked = report.check(name)
        assert unchecked.status is Status.WARN
        assert "10.1.2.3 (as given) is not a public address" in unchecked.diagnosis
        assert unchecked.advice == "state this machine's public address: doctor --address IP"


@pytest.mark.parametrize("domains", [("outlook.com", "gmail.com")])
async def test_any_one_mail_host_answering_is_enough(
    make_mail_sandbox: MakeSandbox, domains: tuple[str, ...]
) -> None:
    report = await check(make_mail_sandbox(world()), domains=domains)
    assert report.check("port_25").status is Status.OK


def test_the_sample_world_passes_every_check(mail_sandbox: Sandbox) -> None:
    """As sample_data/README.md ("The verifying machine") and docs/sandbox.md say."""
    done = cli(mail_sandbox, LISTHYGIENE_HELO="demo.listhygiene.test")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["OK"] * 5
    assert "gmail-smtp-in.l.google.com" in done.stdout.splitlines()[0]
