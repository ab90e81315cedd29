"""A run's progress for people: tqdm bars in a notebook or on a terminal, log lines elsewhere.

``clean()`` reports progress as ``(phase, done, total)`` calls (``pipeline.runner.Progress``).
:class:`ProgressBars` turns them into one tqdm bar per phase (``tqdm.auto``: a widget in Jupyter
when ipywidgets is installed, a text bar otherwise); where the output is neither a terminal nor
a notebook (a scheduler's log), a bar would write a line per refresh, so a log line every few
seconds is written instead (docs/pipeline.md).
"""

import sys
import time
from typing import IO, Any

__all__ = ["PHASE_WORDS", "ProgressBars", "in_notebook"]

#: How each phase of a run is named on screen.
PHASE_WORDS = {"read": "reading", "verify": "verifying", "wait": "waiting to retry"}

_LOG_EVERY = 5.0


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where tqdm.auto draws a widget)."""
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    return get is not None and type(get()).__name__ == "ZMQInteractiveShell"


class ProgressBars:
    """A progress callback: ``ProgressBars()(phase, done, total)``; :meth:`close` at the end."""

    def __init__(self, stream: IO[str] | None = None, *, bars: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        interactive = in_notebook() or bool(getattr(self.stream, "isatty", lambda: False)())
        self.bars = interactive if bars is None else bars
        self.phase = ""
        self._bar: Any = None
        self._logged = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self.bars:
            self._draw(phase, done, total)
        else:
            self._log(phase, done, total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "ProgressBars":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _draw(self, phase: str, done: int, total: int) -> None:
        from tqdm.auto import tqdm  # type: ignore[import-untyped]

        if phase != self.phase or self._bar is None:
            self.close()
            self.phase = phase
            unit = "s" if phase == "wait" else " rows" if phase == "read" else " addresses"
            self._bar = tqdm(
                total=total or None,
                desc=PHASE_WORDS.get(phase, phase),
                unit=unit,
                file=self.stream,
                leave=False,
                dynamic_ncols=True,
            )
        bar = self._bar
        if phase == "wait":  # a countdown: total is the seconds left
            bar.reset(total=total)
            return
        if total and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)
        if total and done >= total:
            bar.refresh()  # the last count shows, whatever the refresh interval

    def _log(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        final = bool(total) and done >= total
        if phase == self.phase and not final and now - self._logged < _LOG_EVERY:
            return
        self.phase, self._logged = phase, now
        words = PHASE_WORDS.get(phase, phase)
        if phase == "wait":
            text = f"{words}: {total} s"
        elif total:
            text = f"{words} {done:,}/{total:,} ({100 * done / total:.0f}%)"
        else:
            text = f"{words} {done:,} rows"
        print(f"{time.strftime('%H:%M:%S')} {text}", file=self.stream, flush=True)
