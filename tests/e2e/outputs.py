"""What a finished run folder must hold, read from disk as a user would."""

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq


def read_run_folder(folder: Path) -> dict[str, Any]:
    """The folder's ``summary.json``, after checking that its per-status Parquet files hold
    exactly the rows it counts and that its report was written."""
    summary = json.loads((folder / "summary.json").read_text())
    assert (folder / "report.html").stat().st_size > 0
    found = {
        path.stem: pq.ParquetFile(path).metadata.num_rows
        for path in folder.glob("*.parquet")
        if path.stem != "changed"
    }
    counts = {status: n for status, n in summary["rows"]["by_status"].items() if n}
    assert {status: n for status, n in found.items() if n} == counts
    assert sum(found.values()) == summary["rows"]["total"]
    return summary
