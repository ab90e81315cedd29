"""Progress for people: tqdm bars where someone watches, log lines in a scheduler's log."""

import io

from listhygiene.progress import ProgressBars


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
