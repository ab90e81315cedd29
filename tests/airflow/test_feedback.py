"""Feedback through Airflow (docs/feedback.md): the example DAG ``feedback_daily`` run with
``dag.test()`` loads the sample exports into a SQLite verdict store, once however often it runs;
the operator also reads the events of a table through a database connection."""

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import set_connection
from tests.airflow.test_dags import run
from tests.airflow.test_verdicts import xcom


def counts(url: str) -> dict[str, int]:
    from listhygiene.verdicts import VerdictStore
    from listhygiene.verdicts.feedback import event_counts

    with VerdictStore(url) as store:
        return event_counts(store)


def test_the_feedback_dag_loads_each_event_once(
    airflow_home: Path, local_connection: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    first = run("feedback_daily", verdicts=url)
    loaded = xcom(first, "add_feedback")
    assert [f["format"] for f in loaded["files"]] == ["sendgrid", "mailgun", "ses", "postmark"]
    assert (loaded["added"], loaded["duplicates"]) == (20, 0)
    assert counts(url)["bounced_hard"] == 2
    again = xcom(run("feedback_daily", verdicts=url), "add_feedback")
    assert (again["added"], again["duplicates"]) == (0, 20)


def test_the_operator_reads_a_table_through_a_connection(
    airflow_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from listhygiene_airflow.operators.feedback import FeedbackOperator

    warehouse = tmp_path / "warehouse.db"
    with sqlite3.connect(warehouse) as conn:
        conn.execute("CREATE TABLE esp_events (email TEXT, event TEXT, at TEXT, bounce_type TEXT)")
        conn.executemany(
            "INSERT INTO esp_events VALUES (?, ?, ?, ?)",
            [
                ("ann@shop.test", "bounced", "2026-11-20T10:00:00Z", "hard"),
                ("bob@shop.test", "clicked", "2026-11-20T10:00:00Z", None),
                ("", "clicked", "2026-11-20T10:00:00Z", None),
            ],
        )
    set_connection(monkeypatch, "warehouse", "sqlite", host=str(warehouse))
    url = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    operator = FeedbackOperator(
        task_id="events", sql_conn_id="warehouse", table="esp_events", verdicts=url
    )
    result = operator.execute({})
    assert (result["added"], result["bad"]) == (2, 1)
    assert counts(url) == {"bounced_hard": 1, "clicked": 1}
