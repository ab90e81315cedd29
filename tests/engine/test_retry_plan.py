"""When the engine asks again after a temporary refusal: the delay a reply names, the schedule,
and what a host's greylisting has shown (engine/retry.py; docs/engine.md, "Retries")."""

import pytest

from listhygiene.engine.retry import HostGreylisting, margin, named_delay, next_retry


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("try again in 30 seconds", 30),
        ("4.7.1 Greylisted for 5 minutes", 300),
        ("<a@b.test>: Recipient address rejected: Greylisted for 1 seconds", 1),
        ("4.7.1 Greylisting in action, please come back in 00:05:00", 300),  # milter-greylist
        ("Deferred due to greylisting. Try again in 5 min", 300),
        ("Please try again in 4 minutes and 59 seconds", 299),
        ("retry after 60s", 60),
        ("Service unavailable, try again in 2 hours", 7200),
        ("Too many connections from 192.0.2.1, try again in 10 seconds", 10),
    ],
)
def test_a_delay_the_reply_names(text: str, seconds: int) -> None:
    assert named_delay(text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "Greylisted, try again later",
        "4.2.0 Greylisted, see http://postgrey.schweikert.ch/help/example.test.html",
        "4.7.1 Service temporarily unavailable",
        "Too many connections, limit 10 per 60 seconds",  # a rate, not a wait
        "Mailbox over quota for 3 days",  # no retry word
        "try again in 400 days",  # not a greylisting delay
    ],
)
def test_no_delay_is_read_into_a_reply_that_names_none(text: str) -> None:
    assert named_delay(text) is None


SCHEDULE = (1.0, 4.0, 15.0)  # asks at 1, 5 and 20 s after the first refusal


def test_the_schedule_when_nothing_else_is_known() -> None:
    assert next_retry(schedule=SCHEDULE, max_wait=60, tried=0) == 1.0
    assert next_retry(schedule=SCHEDULE, max_wait=60, tried=1.02) == 5.0
    assert next_retry(schedule=SCHEDULE, max_wait=60, tried=5.1) == 20.0
    assert next_retry(schedule=SCHEDULE, max_wait=60, tried=20.3) is None


def test_no_schedule_no_retry_whatever_the_reply_says() -> None:
    assert next_retry(schedule=(), max_wait=60, tried=0, named=1) is None


def test_a_named_delay_replaces_the_schedule_within_the_bound() -> None:
    assert next_retry(schedule=SCHEDULE, max_wait=60, tried=0, named=30) == 30 + margin(30)
    assert margin(30) == 1.0
    # longer than the run waits: left to the second pass, no pointless retry at 1, 5, 20 s
    assert next_retry(schedule=SCHEDULE, max_wait=60, tried=0, named=300) is None


def test_a_named_delay_that_did_not_pass_falls_back_on_the_schedule() -> None:
    assert next_retry(schedule=SCHEDULE, max_wait=60, tried=31.2, named=30) is None
    assert next_retry(schedule=(1.0, 4.0, 45.0), max_wait=60, tried=31.2, named=30) == 50.0


def test_a_host_teaches_the_wait_that_passes_and_the_waits_that_do_not() -> None:
    host = HostGreylisting()
    host.saw_refusal(5.1)
    host.saw_pass(20.4)
    host.saw_pass(25.0)  # the shortest pass counts
    assert (host.passed, host.refused) == (20.4, 5.1)
    assert next_retry(schedule=SCHEDULE, max_wait=60, tried=0, host=host) == 20.4
    refusing = HostGreylisting(refused=21.0)  # everything it was asked within 21 s it refused
    assert next_retry(schedule=SCHEDULE, max_wait=60, tried=0, host=refusing) is None


def test_the_schedules_sum_counts_when_longer_than_max_wait() -> None:
    assert next_retry(schedule=(20.0, 60.0), max_wait=60, tried=0, named=70) == 71.0
