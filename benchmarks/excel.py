"""Excel reading: today's reader (openpyxl, read-only, bounded shared strings) against
python-calamine (Rust), on the sample XLSX and on generated larger ones (issue 19, item 7).

Each reader runs in a child process of its own, which reads every row of the first sheet and
turns each into text cells as the pipeline does (``sources.excel._text_row``), in batches of 65,536
Arrow rows; the child reports its wall time and its peak RSS (``ru_maxrss``).

    .venv/bin/python benchmarks/excel.py                 # the sample, 100k and 300k rows
    .venv/bin/python benchmarks/excel.py --rows 1000000

The figures are recorded in docs/pipeline.md ("Reading").
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "crm_export.xlsx"

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
import pyarrow as pa
from listhygiene.pipeline.sources.excel import _text_row

path, reader = Path(sys.argv[1]), sys.argv[2]
started = time.perf_counter()
rows = 0
if reader == "openpyxl":
    from listhygiene.pipeline.sources import open_source
    for batch in open_source(path).batches():
        rows += batch.num_rows
else:
    from python_calamine import CalamineWorkbook
    sheet = CalamineWorkbook.from_path(str(path)).get_sheet_by_index(0)
    pending, header = [], None
    for values in sheet.iter_rows():
        if header is None:
            header = [str(v) for v in values]
            continue
        pending.append(_text_row(values))
        if len(pending) == 65_536:
            pa.Table.from_pylist([dict(zip(header, r)) for r in pending])
            rows += len(pending)
            pending = []
    if pending:
        pa.Table.from_pylist([dict(zip(header, r)) for r in pending])
        rows += len(pending)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"rows": rows, "seconds": seconds, "peak_mib": peak / 2**20}))
"""


def generate(rows: int, folder: Path) -> Path:
    """An XLSX of ``rows`` data rows: the sample's rows repeated, addresses made unique."""
    import openpyxl

    source = openpyxl.load_workbook(SAMPLE, read_only=True)
    sample = [list(r) for r in source.worksheets[0].iter_rows(values_only=True)]
    header, body = sample[0], sample[1:]
    email = header.index("Email")
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet()
    sheet.append(header)
    for index in range(rows):
        row = list(body[index % len(body)])
        if isinstance(row[email], str) and "@" in row[email]:
            row[email] = f"{index}.{row[email]}"
        sheet.append(row)
    path = folder / f"generated-{rows}.xlsx"
    book.save(path)
    return path


def measure(path: Path, reader: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), reader],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="*", default=[100_000, 300_000])
    args = parser.parse_args()
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        files = [SAMPLE] + [generate(n, Path(tmp)) for n in args.rows]
        print(f"{'file':<24} {'MB':>6} {'reader':<9} {'rows':>9} {'seconds':>8} {'peak MiB':>9}")
        for path in files:
            size = path.stat().st_size / 1e6
            for reader in ("openpyxl", "calamine"):
                found = measure(path, reader)
                print(
                    f"{path.name:<24} {size:>6.1f} {reader:<9} {int(found['rows']):>9,} "
                    f"{found['seconds']:>8.2f} {found['peak_mib']:>9.0f}"
                )
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
