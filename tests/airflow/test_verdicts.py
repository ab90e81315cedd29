"""The verdict store through Airflow: the nightly DAG run twice reuses the first night's verdicts
(no SMTP session for them, the counts in the XCom); a Postgres connection named by
``verdicts_conn_id`` on the deferrable form B path submits nothing the second time; mapped
chunks share one store and ``merge_outputs`` adds up their counts and changed rows.

The test session sets ``LISTHYGIENE_VERDICTS=none`` (tests/conftest.py), so every test here names
its store.
"""

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.airflow.conftest import jobs_of, set_connection, set_postgres_connection
from tests.conftest import write_contacts

ACME = "mx.acme-corp.test"
CONTACTS = """id,name,email
1,Alice,alice.johnson@acme-corp.test
2,Bob,bob.smith@acme-corp.test
3,Nobody,nobody.here@acme-corp.test
4,Natalie,natalie.roberts@riverbend-foods.test
5,Blank,
"""
DISTINCT = 4  # the blank cell is no address


@pytest.fixture
def contacts(tmp_path: Path) -> Path:
    return write_contacts(tmp_path, CONTACTS)


def summary_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def xcom(run: Any, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(
            run_id=run.run_id, key="return_value", dag_ids=run.dag_id, task_ids=task_id
        )
        row = session.scalars(query).first()
        assert row is not None, f"no XCom of {task_id}"
        return XComModel.deserialize_value(row)


def test_the_nightly_dag_reuses_last_nights_verdicts_without_smtp(
    airflow_home: Path, local_connection: Any, sandbox: Any, contacts: Path, tmp_path: Path
) -> None:
    """``clean_crm_daily`` on two days with one SQLite store: the second night verifies nothing
    again (every address was fresh) and opens no SMTP session to the reused addresses' host."""
    from airflow.dag_processing.dagbag import DagBag

    from tests.airflow.conftest import REPO

    dag = DagBag(dag_folder=str(REPO / "dags")).get_dag("clean_crm_daily")
    for task in dag.tasks:
        task.retries = 0
    conf = {
        "source": str(contacts),
        "out_root": str(tmp_path / "out"),
        "verdicts": f"sqlite:///{tmp_path / 'verdicts.sqlite'}",
    }
    day = datetime(2025, 6, 1, tzinfo=UTC)
    first = dag.test(run_after=day, logical_date=None, run_conf=conf)
    assert first.state == "success"
    night_one = xcom(first, "clean_crm_export")
    assert night_one["verdicts"] == {"reused": 0, "verified": DISTINCT, "changed": 0}
    sessions = sandbox.stats(ACME).connections
    assert sessions > 0

    second = dag.test(run_after=day + timedelta(days=1), logical_date=None, run_conf=conf)
    assert second.state == "success"
    night_two = xcom(second, "clean_crm_export")
    assert night_two["verdicts"] == {"reused": DISTINCT, "verified": 0, "changed": 0}
    assert night_two["rows"]["by_status"] == night_one["rows"]["by_status"]
    assert sandbox.stats(ACME).connections == sessions  # no SMTP session for reused addresses
    out = tmp_path / "out" / "crm_export" / "2025-06-02"
    assert summary_of(out)["verdicts"] == night_two["verdicts"]
    assert (out / "changed.parquet").exists()
    assert len(pd.read_parquet(out / "changed.parquet")) == 0


def test_the_operator_with_verdicts_none_keeps_nothing(
    airflow_home: Path, local_connection: Any, contacts: Path, tmp_path: Path
) -> None:
    from listhygiene_airflow.operators.verification import EmailVerificationOperator

    for night in ("one", "two"):
        summary = EmailVerificationOperator(
            task_id="clean", source=str(contacts), out=str(tmp_path / night), verdicts="none"
        ).execute(context={})
        assert summary["verdicts"]["reused"] == 0
        assert not (tmp_path / night / "changed.parquet").exists()
    with pytest.raises(ValueError, match="not both"):
        EmailVerificationOperator(
            task_id="both", source="x.csv", out="o", verdicts="none", verdicts_conn_id="pg"
        )


def test_a_postgres_verdicts_conn_id_on_the_deferrable_form_b_path(
    airflow_home: Path,
    service: Any,
    form_b_connection: Any,
    new_pg_database: Callable[[], str],
    contacts: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``submit`` and ``clean`` take the same store: the first run submits a job and keeps its
    verdicts; the second reuses them all before submitting, so it submits (and pays for)
    nothing and does not defer."""
    from airflow.sdk.exceptions import TaskDeferred

    from listhygiene_airflow.operators.verification import EmailVerificationOperator
    from tests.airflow.test_operator import first_event

    key, store = form_b_connection
    set_postgres_connection(monkeypatch, "verdicts_pg", new_pg_database())

    def operator(out: Path) -> Any:
        return EmailVerificationOperator(
            task_id="clean",
            source=str(contacts),
            out=str(out),
            deferrable=True,
            verdicts_conn_id="verdicts_pg",
            max_age="30d",
        )

    _, _, engine = service
    engine.gate.clear()
    try:
        with pytest.raises(TaskDeferred) as deferred:
            operator(tmp_path / "one").execute(context={})
    finally:
        engine.gate.set()
    event = first_event(deferred.value.trigger)
    assert event.payload["status"] == "success", event.payload
    first = operator(tmp_path / "one").execute_complete(context={}, event=event.payload)
    submitted = jobs_of(store, key)
    assert len(submitted) == 1
    assert first["verdicts"] == {"reused": 0, "verified": DISTINCT, "changed": 0}
    assert first["verdict_store"]["store"].startswith("postgresql")
    paid = first["credits"]["used"]
    assert paid > 0

    second = operator(tmp_path / "two").execute(context={})  # no TaskDeferred: nothing to wait on
    assert jobs_of(store, key) == submitted  # nothing submitted
    assert second["verdicts"] == {"reused": DISTINCT, "verified": 0, "changed": 0}
    assert second["credits"]["used"] == 0
    assert second["verdict_store"]["credits_saved"] == paid
    assert second["rows"]["by_status"] == first["rows"]["by_status"]


def test_the_connections_extras_name_the_store(
    airflow_home: Path,
    sandbox: Any,
    contacts: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from listhygiene_airflow.hooks.verification import ListHygieneHook
    from listhygiene_airflow.operators.verification import EmailVerificationOperator
    from tests.airflow.conftest import engine_extras

    database = tmp_path / "store.sqlite"
    set_connection(monkeypatch, "verdicts_sqlite", "sqlite", host=str(database))
    set_connection(
        monkeypatch,
        "listhygiene_default",
        "listhygiene",
        extra={**engine_extras(sandbox), "verdicts_conn_id": "verdicts_sqlite", "max_age": "7d"},
    )
    hook = ListHygieneHook()
    assert hook.verdicts_url() == f"sqlite:///{database}"
    assert hook.max_age == "7d"
    hook.engine_settings()  # the store's extras are not engine settings
    summaries = [
        EmailVerificationOperator(
            task_id="clean", source=str(contacts), out=str(tmp_path / night)
        ).execute(context={})
        for night in ("one", "two")
    ]
    assert [s["verdicts"]["reused"] for s in summaries] == [0, DISTINCT]
    assert summaries[1]["verdict_store"]["max_age_days"]["valid"] == 7
    # the operator's own argument wins over the connection's
    fresh = EmailVerificationOperator(
        task_id="clean", source=str(contacts), out=str(tmp_path / "three"), fresh=True
    ).execute(context={})
    assert fresh["verdicts"] == {"reused": 0, "verified": DISTINCT, "changed": 0}


def test_mapped_chunks_share_one_store_and_merge_their_changes(
    airflow_home: Path, local_connection: Any, contacts: Path, tmp_path: Path
) -> None:
    """Each chunk is verified by its own task against one store; a night without SMTP then a
    night with it: the address SMTP finds gone is a change, listed once in the merged
    ``changed.parquet``, and the merged counts add up the chunks'."""
    from listhygiene_airflow.chunks import SPLIT_MANIFEST, merge_outputs, split_list
    from listhygiene_airflow.operators.verification import EmailVerificationOperator

    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    paths = split_list(contacts, tmp_path / "chunks", chunks=2)
    assert len(paths) == 2
    rows = json.loads((tmp_path / "chunks" / SPLIT_MANIFEST).read_text())["rows"]

    def night(name: str, check_smtp: bool) -> dict[str, Any]:
        summaries = [
            EmailVerificationOperator(
                task_id="verify_chunk",
                source=path,
                out=str(tmp_path / name / f"chunk-{index}"),
                verdicts=store,
                check_smtp=check_smtp,
            ).execute(context={})
            for index, path in enumerate(paths)
        ]
        return merge_outputs(summaries, tmp_path / name / "merged", expected_rows=rows)

    first = night("one", check_smtp=False)
    assert first["verdicts"] == {"reused": 0, "verified": DISTINCT, "changed": 0}
    second = night("two", check_smtp=True)  # a DNS-only verdict never stands in for SMTP
    assert second["verdicts"] == {"reused": 0, "verified": DISTINCT, "changed": 1}
    changed = pd.read_parquet(tmp_path / "two" / "merged" / "changed.parquet")
    assert list(changed["email"]) == ["nobody.here@acme-corp.test"]
    assert list(changed["previous_status"]) == ["valid"]
    assert list(changed["status"]) == ["invalid"]
    assert "_listhygiene_row" not in changed.columns
    third = night("three", check_smtp=True)
    assert third["verdicts"] == {"reused": DISTINCT, "verified": 0, "changed": 0}


def test_the_operator_writes_back_to_a_postgres_connection(
    airflow_home: Path,
    local_connection: Any,
    new_pg_database: Callable[[], str],
    contacts: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``write_back_conn_id`` and ``write_back_table``: after publishing, the result columns are
    upserted into the connection's table, keyed by ``id``; a second run writes the same rows."""
    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    from listhygiene_airflow.operators.verification import EmailVerificationOperator

    url = make_url(new_pg_database())
    set_postgres_connection(monkeypatch, "crm_pg", url.render_as_string(hide_password=False))
    for night in ("one", "two"):
        summary = EmailVerificationOperator(
            task_id="clean",
            source=str(contacts),
            out=str(tmp_path / night),
            verdicts="none",
            write_back_conn_id="crm_pg",
            write_back_table="email_status",
            write_back_key="id",
        ).execute(context={})
        assert summary["write_back"]["written"] == 5
        assert summary["write_back"]["table"] == "email_status"
    engine = sa.create_engine(url.set(drivername="postgresql+psycopg"))
    with engine.connect() as conn:
        rows = dict(conn.execute(sa.text("SELECT id, status FROM email_status")).all())
    engine.dispose()
    written = pd.concat(pd.read_parquet(p) for p in (tmp_path / "two").glob("*.parquet"))
    assert rows == dict(zip(written["id"].astype(str), written["status"], strict=True))
    assert rows["5"] == "invalid"  # the blank cell: invalid_syntax, still written by its id
    with pytest.raises(ValueError, match="go together"):
        EmailVerificationOperator(
            task_id="half", source="x.csv", out="o", write_back_conn_id="crm_pg"
        )
