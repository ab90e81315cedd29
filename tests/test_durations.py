"""One reading of durations for every option that takes one (listhygiene.durations)."""

import click
import pytest

from listhygiene.cli.clean import parse_duration as option_duration
from listhygiene.durations import parse_duration
from listhygiene.verdicts import Freshness


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("2 sec", 2),
        ("15m", 900),
        ("3min", 180),
        ("12h", 43200),
        ("30d", 30 * 86400),
        ("2w", 14 * 86400),
        ("1.5h", 5400),
        (" 7D ", 7 * 86400),
    ],
)
def test_every_option_reads_a_duration_alike(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert option_duration(text) == seconds  # --retry-unknown-after
    assert Freshness.of(text).limit("valid") == seconds  # --max-age


@pytest.mark.parametrize("text", ["soon", "-5m", "5y", "", "m"])
def test_a_non_duration_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text).replace("[", r"\[")):
        parse_duration(text)
    with pytest.raises(click.BadParameter):
        option_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (12.4, "12 s"),
        (95, "1 min 35 s"),
        (600, "10 min"),
        (2193.5, "37 min"),
        (7800, "2 h 10 min"),
        (90000, "1 d 1 h"),
    ],
)
def test_a_duration_is_written_back_in_its_two_largest_units(seconds: float, text: str) -> None:
    from listhygiene.durations import format_duration

    assert format_duration(seconds) == text
