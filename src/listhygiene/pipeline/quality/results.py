"""What the checks return: one :class:`CheckResult` per check, in the order of :data:`CHECKS`,
gathered in a :class:`QualityReport` (``summary.json`` holds it under ``quality``).

Most of the package's modules build or read these, so this one sits at the bottom and imports
none of them.
"""

from dataclasses import asdict, dataclass
from typing import Any

#: Stable machine names and one sentence for people, in the order they are reported.
CHECKS: dict[str, str] = {
    "rows_in_exactly_one_output": "Every input row is written to exactly one output file.",
    "status_allowed": (
        "Every status is one of the seven, and every row is in the file of its own status."
    ),
    "score_in_range": "Every row has a score between 0 and 1.",
    "email_present": "The email column exists and no row has a null email.",
    "file_counts_match_summary": "Each output file holds as many rows as the summary says.",
}

#: How many offending values a check's details quote before "and N more".
SAMPLE = 5


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict; ``details`` says what was found, concretely, pass or fail."""

    name: str
    description: str
    passed: bool
    details: str


@dataclass(frozen=True)
class QualityReport:
    """All checks of one run; ``seconds`` is the validation time, GX's one-off import excluded."""

    passed: bool
    checks: tuple[CheckResult, ...]
    seconds: float
    #: Why no check ran (great-expectations is not installed); None when they ran.
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON-safe form written into ``summary.json`` under ``quality``."""
        found: dict[str, Any] = {
            "passed": self.passed,
            "checks": [asdict(check) for check in self.checks],
            "seconds": round(self.seconds, 3),
        }
        if self.skipped is not None:
            found["skipped"] = self.skipped
        return found

    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(check for check in self.checks if not check.passed)
