"""The example DAGs, run with ``dag.test()`` in the session's Airflow home: against the sandbox
through the local engine, and against the service in form B (the deferrable path through the
trigger); their import; and the provider's registration.

Most runs are what ``airflow dags trigger`` makes: no logical date (so no ``ds``, ``ts`` or data
interval to template with), only ``run_id`` and ``dag_run.run_after``. ``dag.test()`` sets a
logical date unless given ``logical_date=None``.
"""

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.airflow.conftest import AIRFLOW_ENV, REPO, jobs_of, set_connection

DAGS = {"clean_crm_daily", "clean_from_postgres", "clean_mapped_chunks"}
DAY = datetime(2025, 6, 1, tzinfo=UTC)
CRM = REPO / "sample_data" / "crm_export.csv"
STATUSES = ("valid", "invalid", "unknown", "risky", "disposable", "catchall", "role")


def dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def run(dag_id: str, *, scheduled: bool = False, **conf: Any) -> Any:
    """Run the DAG as a manual trigger does (no logical date), or as the scheduler does (a
    logical date, equal to ``run_after`` in Airflow 3's cron timetables), after ``DAY``."""
    logical_date = DAY if scheduled else None
    dag = dagbag().get_dag(dag_id)
    for task in dag.tasks:
        task.retries = 0  # a failure fails the test now, not after the DAG's retry delay
    run = dag.test(run_after=DAY, logical_date=logical_date, run_conf=conf)
    assert (run.logical_date is None) is not scheduled
    assert run.state == "success", [
        (ti.task_id, ti.map_index, ti.state) for ti in run.get_task_instances()
    ]
    return run


def written(out: Path) -> dict[str, int]:
    summary = json.loads((out / "summary.json").read_text())
    counts = {s: len(pd.read_parquet(out / f"{s}.parquet")) for s in STATUSES}
    assert counts == summary["rows"]["by_status"]
    assert summary["quality"]["passed"]
    return counts


def statuses(out: Path) -> dict[tuple[str, str], str]:
    """Each output row's status by its ``Contact ID`` and ``Email`` (rows repeated in the sample
    export repeat both, and one address has one verdict in a run)."""
    columns = ["Contact ID", "Email", "status"]
    rows = pd.concat([pd.read_parquet(out / f"{s}.parquet", columns=columns) for s in STATUSES])
    keys = list(zip(rows["Contact ID"].fillna(""), rows["Email"].fillna(""), strict=True))
    found = dict(zip(keys, rows["status"], strict=True))
    assert len(set(zip(keys, rows["status"], strict=True))) == len(found)  # one status a key
    return found


def test_dags_import_without_errors(airflow_home: Path) -> None:
    bag = dagbag()
    assert bag.import_errors == {}
    assert set(bag.dag_ids) >= DAGS


def test_provider_is_registered(airflow_home: Path) -> None:
    from listhygiene_airflow import get_provider_info

    env = {**os.environ, **AIRFLOW_ENV}
    airflow = Path(sys.executable).with_name("airflow")
    listed = subprocess.run(
        [str(airflow), "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    names = {p["package_name"] for p in json.loads(listed.stdout)}
    assert "listhygiene" in names
    hooks = subprocess.run(
        [str(airflow), "providers", "hooks", "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    assert "listhygiene" in hooks.stdout
    info = get_provider_info()
    fields = info["connection-types"][0]["conn-fields"]
    assert fields["backend"]["schema"]["enum"] == ["local", "form-a", "form-b"]


@pytest.mark.parametrize("scheduled", [False, True], ids=["triggered", "scheduled"])
def test_crm_daily_with_the_local_engine(
    airflow_home: Path, local_connection: Any, tmp_path: Path, scheduled: bool
) -> None:
    run("clean_crm_daily", scheduled=scheduled, out_root=str(tmp_path))
    counts = written(tmp_path / "crm_export" / "2025-06-01")
    assert sum(counts.values()) == 1000
    assert counts["valid"] > 0
    assert counts["invalid"] > 0


def test_crm_daily_through_form_b_defers_to_the_trigger(
    airflow_home: Path,
    service: Any,
    form_b_connection: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from listhygiene_airflow.triggers.verification import VerificationJobTrigger

    _, _, engine = service
    key, store = form_b_connection
    events: list[dict[str, Any]] = []
    original = VerificationJobTrigger.run

    async def watched(self: VerificationJobTrigger) -> Any:
        engine.gate.set()  # the job may end only once the task has deferred to the trigger
        async for event in original(self):
            events.append(event.payload)
            yield event

    monkeypatch.setattr(VerificationJobTrigger, "run", watched)
    engine.gate.clear()
    try:
        run("clean_crm_daily", out_root=str(tmp_path))
    finally:
        engine.gate.set()
    assert [e["status"] for e in events] == ["success"]
    assert len(jobs_of(store, key)) == 1  # 1,000 rows, one form B bulk job
    out = tmp_path / "crm_export" / "2025-06-01"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"]["name"] == "form-b"
    assert sum(written(out).values()) == 1000


def test_mapped_chunks_merge_to_what_one_run_gives(
    airflow_home: Path, local_connection: Any, tmp_path: Path
) -> None:
    import listhygiene

    run("clean_mapped_chunks", out_root=str(tmp_path), chunks=3)
    folder = tmp_path / "mapped" / "20250601T000000"  # one folder per run
    assert sorted(p.name for p in folder.glob("chunk-*") if p.is_dir()) == [
        "chunk-0",
        "chunk-1",
        "chunk-2",
    ]
    merged = written(folder / "merged")
    settings = {k: v for k, v in local_connection.items() if k != "backend"}
    single = listhygiene.clean(
        REPO / "sample_data" / "crm_export.csv", tmp_path / "single", **settings
    )
    assert sum(merged.values()) == sum(single.counts.values())
    chunked, alone = statuses(folder / "merged"), statuses(tmp_path / "single")
    assert chunked.keys() == alone.keys()
    # Every row has the same status both ways, but for an unknown one: what time decides (a host
    # slower than the time limit on a loaded machine, one that takes two connections at once)
    # may differ between two runs against the same sandbox, and did on a slow machine.
    differ = {row: (chunked[row], alone[row]) for row in chunked if chunked[row] != alone[row]}
    assert all("unknown" in pair for pair in differ.values()), differ
    assert len(differ) <= 3, differ
    # the merged files keep the input's order and columns
    valid = pd.read_parquet(folder / "merged" / "valid.parquet")
    single_valid = single.frame("valid")
    assert list(valid.columns) == list(single_valid.columns)
    both = set(valid["Contact ID"]) & set(single_valid["Contact ID"])
    assert [i for i in valid["Contact ID"] if i in both] == [
        i for i in single_valid["Contact ID"] if i in both
    ]


@pytest.fixture
def postgres_table(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A table in the PostgreSQL of the test environment, as the ``crm_postgres`` connection."""
    psycopg = pytest.importorskip("psycopg")
    from sqlalchemy.engine import make_url

    url = make_url(
        os.environ.get("LISTHYGIENE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
    )
    try:
        connection = psycopg.connect(
            host=url.host,
            port=url.port or 5432,
            user=url.username,
            password=url.password,
            dbname=url.database,
            connect_timeout=3,
            autocommit=True,
        )
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {url.render_as_string()}: {exc}")
    name = f"crm_{uuid.uuid4().hex[:10]}"
    frame = pd.read_csv(CRM, dtype=str, on_bad_lines="skip").head(60)
    connection.execute(f'create table "{name}" (id int, "Email" text)')
    with connection.cursor() as cursor:
        cursor.executemany(
            f'insert into "{name}" values (%s, %s)',
            [(i, e if isinstance(e, str) else None) for i, e in enumerate(frame["Email"])],
        )
    set_connection(
        monkeypatch,
        "crm_postgres",
        "postgres",
        host=url.host,
        port=url.port or 5432,
        login=url.username,
        password=url.password,
        schema=url.database,
    )
    try:
        yield name
    finally:
        connection.execute(f'drop table if exists "{name}"')
        connection.close()


def test_from_postgres_reads_the_table_through_a_connection(
    airflow_home: Path, local_connection: Any, postgres_table: str, tmp_path: Path
) -> None:
    run("clean_from_postgres", out_root=str(tmp_path), table=postgres_table, email_column="Email")
    counts = written(tmp_path / postgres_table / "2025-06-01")
    assert sum(counts.values()) == 60


def airflow_cli(*args: str) -> str:
    """An ``airflow`` command in the session's Airflow home; its standard output."""
    env = {**os.environ, **AIRFLOW_ENV}
    airflow = Path(sys.executable).with_name("airflow")
    done = subprocess.run(
        [str(airflow), *args], capture_output=True, text=True, env=env, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# Five `airflow` commands, each a fresh interpreter importing Airflow: past the default 120 s on
# a loaded 2-core machine.
@pytest.mark.timeout(600)
def test_the_documented_trigger_renders_every_path(airflow_home: Path, tmp_path: Path) -> None:
    """``airflow dags trigger`` as docs/airflow.md shows it makes a run without a logical date;
    Airflow's own ``tasks render`` of that run renders the output folders (``{{ ds }}`` failed
    here with ``UndefinedError``)."""
    airflow_cli("dags", "reserialize")
    rendered = {}
    for dag_id, task_id in [
        ("clean_crm_daily", "clean_crm_export"),
        ("clean_mapped_chunks", "split"),
    ]:
        conf = json.dumps({"out_root": str(tmp_path)})
        (created,) = json.loads(
            airflow_cli("dags", "trigger", dag_id, "--conf", conf, "--output", "json")
            .strip()
            .splitlines()[-1]
        )
        assert created["logical_date"] is None
        text = airflow_cli("tasks", "render", dag_id, task_id, created["dag_run_id"])
        # manual__<run_after>: the day the run was triggered
        rendered[dag_id] = (text, created["dag_run_id"].removeprefix("manual__")[:10])
    text, day = rendered["clean_crm_daily"]
    assert f"{tmp_path}/crm_export/{day}\n" in text
    text, day = rendered["clean_mapped_chunks"]
    assert f"'{tmp_path}/mapped/{day.replace('-', '')}T" in text
