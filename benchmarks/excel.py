"""Excel reading: the XLSX reader (``sources.xlsx_sheet``, issue 28 item 3) against the one it
replaced (openpyxl, read-only) and python-calamine (Rust), on the sample XLSX and on generated
larger ones; and ``listhygiene clean`` of a generated XLSX, end to end.

Each reader runs in a child process of its own, which reads every row of the first sheet as
text cells into Arrow tables of 65,536 rows: the new reader through the pipeline's source
(``open_source(path).batches()``), openpyxl and calamine with the cell-to-text rules of
``sources.excel._text_row`` and the same tables; the child reports its wall time after its
imports and its peak RSS (``ru_maxrss``). The machine is shared: the 1-minute load average is
printed before and after, and the figures are upper bounds when it is above the cores.

    .venv/bin/python benchmarks/excel.py                  # the sample, 100k and 300k rows
    .venv/bin/python benchmarks/excel.py --rows 1000000 --readers xlsx_sheet
    .venv/bin/python benchmarks/excel.py --rows 100000 --cli   # and the CLI, timed

``--cli`` runs ``/usr/bin/time -v listhygiene clean FILE --out DIR --no-smtp --verdicts none``
on each generated file and prints its wall time and peak RSS. The figures are recorded in
docs/pipeline.md ("Reading").
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "crm_export.xlsx"
READERS = ("xlsx_sheet", "openpyxl", "calamine")

CHILD = r"""
import itertools, json, resource, sys, time
from pathlib import Path
import pyarrow as pa
from listhygiene.pipeline.sources import open_source
from listhygiene.pipeline.sources.excel import _text_row

path, reader = Path(sys.argv[1]), sys.argv[2]
pa.array(["warm"])  # pyarrow's first conversion imports pandas: not the reader's time


def tables(rows):
    rows = iter(rows)
    header = next(rows)
    count = 0
    while pending := list(itertools.islice(rows, 65_536)):
        columns = list(itertools.zip_longest(*pending))
        pa.Table.from_arrays([pa.array(c, pa.string()) for c in columns],
                             names=[f"c{i}" for i in range(len(columns))])
        count += len(pending)
    return count


started = time.perf_counter()
if reader == "xlsx_sheet":
    rows = sum(batch.num_rows for batch in open_source(path).batches())
elif reader == "openpyxl":  # the reader before issue 28
    import openpyxl
    book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    sheet = book.worksheets[0]
    sheet.reset_dimensions()
    values = (_text_row(v) for v in sheet.iter_rows(values_only=True))
    rows = tables(row for row in values if row)
    book.close()
else:
    from python_calamine import CalamineWorkbook
    sheet = CalamineWorkbook.from_path(str(path)).get_sheet_by_index(0)
    rows = tables(row for row in (_text_row(v) for v in sheet.iter_rows()) if row)
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


def clean(path: Path, folder: Path) -> tuple[str, float, float]:
    """``listhygiene clean`` of ``path`` under ``/usr/bin/time -v``: the command, its wall
    seconds and its peak RSS in MiB."""
    out = folder / f"out-{path.stem}"
    shutil.rmtree(out, ignore_errors=True)
    command = [
        "/usr/bin/time",
        "-v",
        str(Path(sys.executable).parent / "listhygiene"),
        "clean",
        str(path),
        "--out",
        str(out),
        "--no-smtp",
        "--verdicts",
        "none",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", done.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if wall is None or rss is None:
        raise RuntimeError(f"no figures from /usr/bin/time:\n{done.stderr}")
    seconds = sum(float(p) * 60**i for i, p in enumerate(reversed(wall.group(1).split(":"))))
    return " ".join(command), seconds, int(rss.group(1)) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="*", default=[100_000, 300_000])
    parser.add_argument("--readers", nargs="*", choices=READERS, default=list(READERS))
    parser.add_argument("--cli", action="store_true", help="also time listhygiene clean")
    args = parser.parse_args()
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        generated = [generate(n, Path(tmp)) for n in args.rows]
        print(
            f"{'file':<24} {'MB':>6} {'reader':<10} {'rows':>9} {'seconds':>8} "
            f"{'rows/s':>8} {'peak MiB':>9}"
        )
        for path in [SAMPLE, *generated]:
            size = path.stat().st_size / 1e6
            for reader in args.readers:
                found = measure(path, reader)
                print(
                    f"{path.name:<24} {size:>6.1f} {reader:<10} {int(found['rows']):>9,} "
                    f"{found['seconds']:>8.2f} {found['rows'] / found['seconds']:>8,.0f} "
                    f"{found['peak_mib']:>9.0f}"
                )
        if args.cli:
            for path in generated:
                command, seconds, peak = clean(path, Path(tmp))
                print(f"{command}\n  wall {seconds:.2f} s, peak RSS {peak:.0f} MiB")
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
