"""Port 25 unreachable from where the task runs: a sandbox world whose mail hosts mostly refuse
connections. The task fails with the run's one-line health problem and publishes nothing,
unless ``accept_unreachable`` says to publish the unknowns; the merge of mapped chunks judges
the chunks' health together."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import engine_extras, set_connection
from tests.conftest import write_contacts

REFUSING = [f"closed{i}.test" for i in range(6)]
WORLD = {
    "domains": {
        **{
            d: {"mx": [{"preference": 10, "host": f"mx.{d}"}], "mailboxes": ["ann"]}
            for d in REFUSING
        },
        "open.test": {"mx": [{"preference": 10, "host": "mx.open.test"}], "mailboxes": ["ann"]},
    },
    "hosts": {
        **{f"mx.{d}": {"behaviour": "refuse"} for d in REFUSING},
        "mx.open.test": {},
    },
}


@pytest.fixture(scope="module")
def closed_world() -> Iterator[Any]:
    from listhygiene.sandbox import Sandbox

    with Sandbox(WORLD) as running:
        yield running


@pytest.fixture
def closed_connection(
    airflow_home: Path, closed_world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    extras = engine_extras(closed_world, smtp_timeout=1.0)
    set_connection(monkeypatch, "listhygiene_default", "listhygiene", extra=extras)


@pytest.fixture
def contacts(tmp_path: Path) -> Path:
    rows = [(i, f"ann{i}@{d}") for i, d in enumerate([*REFUSING, "open.test"] * 2)]
    return write_contacts(tmp_path, rows)


def operator(contacts: Path, out: Path, **kwargs: Any) -> Any:
    from listhygiene_airflow.operators.verification import EmailVerificationOperator

    return EmailVerificationOperator(task_id="clean", source=str(contacts), out=str(out), **kwargs)


def test_the_task_fails_with_the_health_problem(
    closed_connection: None, contacts: Path, tmp_path: Path
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    out = tmp_path / "out"
    with pytest.raises(AirflowFailException) as failed:
        operator(contacts, out).execute(context={})
    message = str(failed.value)
    assert "6 of 7 domains could not be reached on the SMTP port" in message
    assert "accept_unreachable=True" in message
    assert "\n" not in message
    assert not (out / "summary.json").exists()  # nothing published


def test_accept_unreachable_publishes_the_unknowns(
    closed_connection: None, contacts: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    summary = operator(contacts, out, accept_unreachable=True, deferrable=True).execute(context={})
    assert summary["rows"]["by_status"]["unknown"] == 12
    assert summary["health"]["problem"]
    assert json.loads((out / "summary.json").read_text())["rows"]["total"] == 14


# A mapped DAG run and its merge: past the default 120 s on a loaded 2-core machine.
@pytest.mark.timeout(600)
def test_the_merge_of_mapped_chunks_judges_their_health_together(
    closed_connection: None, contacts: Path, tmp_path: Path
) -> None:
    """Each chunk sees too few domains to judge; together they show the problem."""
    from listhygiene.pipeline.run import UnreachableError
    from listhygiene_airflow.chunks import merge_outputs, split_list

    paths = split_list(contacts, tmp_path / "chunks", chunks=3)
    summaries = [
        operator(Path(p), tmp_path / f"chunk-{i}").execute(context={}) for i, p in enumerate(paths)
    ]
    assert not any(s["health"]["problem"] for s in summaries)
    with pytest.raises(UnreachableError, match="could not be reached on the SMTP port"):
        merge_outputs(summaries, tmp_path / "merged", expected_rows=14)
    assert not (tmp_path / "merged" / "summary.json").exists()
    merged = merge_outputs(
        summaries, tmp_path / "merged", expected_rows=14, accept_unreachable=True
    )
    assert merged["health"]["problem"]
    assert merged["rows"]["by_status"]["unknown"] == 12
