"""Row conservation across batches: which input row numbers were written, once or more.

GX checks each batch on its own, but whether every input row comes out exactly once spans the
batches, so it is counted exactly beside GX: one bit per input row says "seen", one "seen again"
(2.5 MB at 10,000,000 rows), which names the duplicated and the missing row numbers.
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from listhygiene.pipeline.quality.results import SAMPLE

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


@dataclass
class _RowLedger:
    """Which input row numbers were written, once or more: two bits per input row.

    GX checks each batch; whether a row number was written in two batches, or in none, needs all
    of them. Null, fractional and out-of-range numbers are GX's to report, not counted here.
    """

    expected: int
    written: int = 0
    #: Rows beyond the first of each repeated number.
    repeats: int = 0
    #: The first repeated numbers found, with how many times each was written.
    sample: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        import numpy as np

        size = (self.expected + 7) // 8
        self.seen = np.zeros(size, np.uint8)
        self.again = np.zeros(size, np.uint8)

    def add(self, numbers: "pd.Series") -> None:
        import numpy as np
        import pandas as pd

        self.written += len(numbers)
        plain = numbers.to_numpy() if numbers.dtype == np.int64 else None
        if plain is not None and bool((plain[1:] > plain[:-1]).all()):
            # rising, as a status file's rows are written: no number twice, nothing to sort
            index = plain[(plain >= 1) & (plain <= self.expected)] - 1
            counts = np.ones(len(index), np.int64)
        else:
            values = pd.to_numeric(numbers, errors="coerce").to_numpy(
                dtype="float64", na_value=np.nan
            )
            with np.errstate(invalid="ignore"):
                usable = (values >= 1) & (values <= self.expected) & (values == np.floor(values))
            index, counts = np.unique(values[usable].astype(np.int64) - 1, return_counts=True)
        if not len(index):
            return
        byte, bit = index >> 3, np.left_shift(1, index & 7).astype(np.uint8)
        before = (self.seen[byte] & bit) != 0
        again = before | (counts > 1)
        self.repeats += int(counts[before].sum()) + int((counts[~before & again] - 1).sum())
        np.bitwise_or.at(self.seen, byte, bit)
        if again.any():
            np.bitwise_or.at(self.again, byte[again], bit[again])
            self._sample(index[again] + 1, counts[again], before[again])

    def _sample(self, numbers: "np.ndarray", counts: "np.ndarray", before: "np.ndarray") -> None:
        import numpy as np

        known = np.isin(numbers, np.fromiter(self.sample, np.int64, len(self.sample)))
        for number, count in zip(numbers[known], counts[known], strict=True):
            self.sample[int(number)] += int(count)
        room = SAMPLE - len(self.sample)
        for number, count, was in list(
            zip(numbers[~known], counts[~known], before[~known], strict=True)
        )[:room]:
            self.sample[int(number)] = int(count) + int(was)

    def shared(self) -> int:
        """Rows whose number another row has too (every copy counts, as GX counts them)."""
        import numpy as np

        return self.repeats + int(np.bitwise_count(self.again).sum())

    def missing(self) -> tuple[int, list[int]]:
        """How many input row numbers no row has, and the first few."""
        import numpy as np

        count = self.expected - int(np.bitwise_count(self.seen).sum())
        first: list[int] = []
        step = 1 << 16
        for start in range(0, len(self.seen), step):
            if not count or len(first) >= SAMPLE:
                break
            bits = np.unpackbits(self.seen[start : start + step], bitorder="little")
            absent = np.flatnonzero(bits == 0) + start * 8 + 1
            first.extend(int(n) for n in absent[absent <= self.expected][: SAMPLE - len(first)])
        return count, first
