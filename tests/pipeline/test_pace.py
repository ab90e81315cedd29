"""The time model of ``clean --estimate`` (``pipeline/pace.py``; docs/pipeline.md, "Estimating a
run"): each figure worked out by hand from the model's assumptions and the engine's budgets."""

import math
from pathlib import Path

import pytest

from listhygiene.engine import EngineSettings
from listhygiene.engine.providers import provider_of_domain
from listhygiene.pipeline.pace import OWN_HOSTS, PACE, time_needed

SETTINGS = EngineSettings(concurrency=50, host_rate=5.0, rcpt_per_session=25)


def session_work(addresses: int) -> float:
    """One domain's SMTP work: its sessions (the catch-all probe is one recipient more)."""
    sessions = math.ceil((addresses + 1) / 25)
    return sessions * PACE.session_seconds + (addresses + 1) * PACE.rcpt_seconds


def test_a_big_providers_domains_share_its_budget() -> None:
    # 2,000 Gmail addresses: 81 sessions, Google's budget is 5 at once and 2 new a second
    estimate = time_needed({"gmail.com": 2000}, {"gmail.com": "google"}, SETTINGS, check_smtp=True)
    work = session_work(2000)
    assert estimate.sessions == 81
    assert estimate.limited_by == "provider google"
    assert estimate.seconds == pytest.approx(PACE.dns_seconds + max(work, work / 5, 81 / 2))
    assert estimate.providers["google"].addresses == 2000
    assert estimate.recognised == 1


def test_microsoft_is_slower_than_google_for_the_same_list() -> None:
    domains = {f"d{i}.test": 100 for i in range(30)}
    on = {provider: dict.fromkeys(domains, provider) for provider in ("google", "microsoft")}
    google = time_needed(domains, on["google"], SETTINGS, check_smtp=True)
    microsoft = time_needed(domains, on["microsoft"], SETTINGS, check_smtp=True)
    total = 30 * session_work(100)
    # Microsoft's budget: 3 sessions at once (Google's: 5)
    assert microsoft.seconds == pytest.approx(PACE.dns_seconds + total / 3)
    assert google.seconds == pytest.approx(PACE.dns_seconds + total / 5)


def test_own_hosts_run_side_by_side_within_the_runs_concurrency() -> None:
    domains = {f"own{i}.test": 10 for i in range(200)} | {"big.test": 500}
    estimate = time_needed(domains, {}, SETTINGS, check_smtp=True)
    own = estimate.providers[OWN_HOSTS]
    assert (own.domains, own.addresses, estimate.recognised) == (201, 2500, 0)
    longest = PACE.dns_seconds + session_work(500)  # one session after another on big.test
    together = (
        PACE.dns_seconds * math.ceil(201 / 50) + (200 * session_work(10) + session_work(500)) / 50
    )
    assert own.seconds == pytest.approx(longest)
    assert estimate.seconds == pytest.approx(max(longest, together))
    assert estimate.limited_by == ("domain big.test" if longest > together else "concurrency")


def test_without_smtp_only_dns_counts() -> None:
    domains = {f"d{i}.test": 3 for i in range(120)}
    estimate = time_needed(domains, {}, SETTINGS, check_smtp=False)
    assert (estimate.sessions, estimate.limited_by) == (0, "dns")
    assert estimate.seconds == pytest.approx(PACE.dns_seconds * 3)  # 120 domains, 50 at once


def test_nothing_to_verify_takes_no_time() -> None:
    estimate = time_needed({}, {}, SETTINGS, check_smtp=True)
    assert (estimate.seconds, estimate.limited_by, estimate.domains) == (0.0, None, 0)


def test_a_provider_limits_file_changes_the_estimate(tmp_path: Path) -> None:
    limits = tmp_path / "limits.toml"
    limits.write_text("[yahoo]\nconcurrency = 1\nrate = 0.1\n")
    settings = SETTINGS.model_copy(update={"provider_limits": limits})
    estimate = time_needed({"aol.com": 300}, {"aol.com": "yahoo"}, settings, check_smtp=True)
    sessions = math.ceil(301 / 25)
    assert estimate.seconds == pytest.approx(
        PACE.dns_seconds + max(session_work(300), sessions / 0.1)
    )
    assert estimate.as_dict()["assumptions"]["provider_budgets"]["yahoo"] == [1, 0.1]


def test_providers_known_by_name_alone() -> None:
    assert provider_of_domain("GMail.com.") == "google"
    assert provider_of_domain("hotmail.co.uk") == "microsoft"
    assert provider_of_domain("aol.com") == "yahoo"
    assert provider_of_domain("me.com") == "icloud"
    assert provider_of_domain("acme-corp.com") is None  # a tenant's name says nothing
