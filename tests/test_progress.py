"""Progress for people: tqdm bars where someone watches, log lines in a scheduler's log."""

import io
from typing import TYPE_CHECKING

import pytest

from listhygiene.progress import ProgressBars

if TYPE_CHECKING:
    from listhygiene.sandbox import Sandbox


def test_bars_follow_each_phase_to_its_end() -> None:
    out = io.StringIO()
    with ProgressBars(out, bars=True) as progress:
        for done in range(0, 501, 100):
            progress("read", done, 0)
        read_bar = progress._bar
        for done in range(0, 301, 50):
            progress("verify", done, 300)
        assert read_bar.n == 500  # the read phase's bar was closed at its last count
        assert progress._bar.n == 300
        assert progress._bar.total == 300
    text = out.getvalue()
    assert "reading" in text
    assert "verifying" in text
    assert "300/300" in text  # the final count is drawn, not skipped by the refresh interval


def test_a_wait_is_a_countdown_of_its_seconds() -> None:
    out = io.StringIO()
    progress = ProgressBars(out, bars=True)
    progress("verify", 10, 20)
    progress("wait", 0, 30)
    assert progress._bar.total == 30
    assert "waiting to retry" in out.getvalue()
    progress.close()
    assert progress._bar is None


def test_without_a_terminal_a_log_line_every_few_seconds_and_at_the_end() -> None:
    out = io.StringIO()  # not a terminal, not a notebook: no bars
    progress = ProgressBars(out)
    assert progress.bars is False
    for done in range(1, 1001):
        progress("verify", done, 1000)
    lines = out.getvalue().splitlines()
    # the first call and the last (done == total) are logged; the 998 between fall in 5 s
    assert len(lines) == 2
    assert lines[0].endswith("verifying 1/1,000 (0%)")
    assert lines[1].endswith("verifying 1,000/1,000 (100%)")


def test_clean_with_progress_true_reports_each_phase(
    mail_sandbox: "Sandbox", capsys: pytest.CaptureFixture[str]
) -> None:
    import pandas as pd

    import listhygiene

    frame = pd.DataFrame({"email": [f"user{i}@example.com" for i in range(50)]})
    settings = mail_sandbox.engine_settings(helo="verifier.test", retry_delays=())
    with listhygiene.clean(frame, settings=settings, check_smtp=False, progress=True) as result:
        assert result.summary["rows"]["total"] == 50
    logged = capsys.readouterr().err  # not a terminal here: log lines
    assert "reading" in logged
    assert "verifying" in logged
