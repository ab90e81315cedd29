"""Dagster as docs/dagster.md runs it: ``dagster dev -f dagster_defs/definitions.py`` (the web
server and the daemon, as processes) against the sample mail world; the export sensor turned on
with ``dagster sensor start`` picks up a new file, and ``dagster asset materialize --partition``
runs a partition from the CLI. Runs and asset check results are read from the web server's
GraphQL API, as the UI shows them. A second code location (``tests/e2e/fleet_defs.py``) holds
the chunked clean job, launched with ``dagster job launch`` onto the deployment's run launcher
and its multiprocess executor for the fleet run (tests/e2e/fleet.py)."""

import csv
import itertools
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import empty_redis
from tests.e2e.fleet import (
    FleetWorld,
    assert_chunks_overlapped,
    assert_hosts_not_pushed,
    assert_merged_polite,
    assert_same_as_single,
    assert_split_cut_the_giant,
)
from tests.e2e.outputs import read_run_folder
from tests.e2e.processes import REPO, Processes, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

DEFS = "dagster_defs/definitions.py"
FLEET_DEFS = "tests/e2e/fleet_defs.py"
EXPORT = "week-01.csv"
EXPORT_ROWS = 40
CHECKS = {
    "email_present",
    "file_counts_match_summary",
    "rows_in_exactly_one_output",
    "score_in_range",
    "status_allowed",
}


class Dagster:
    """The running ``dagster dev``: its CLI (same environment) and its GraphQL API."""

    def __init__(self, processes: Processes, port: int, data: Path, exports: Path) -> None:
        self.processes = processes
        self.url = f"http://127.0.0.1:{port}/graphql"
        self.data = data
        self.exports = exports

    def graphql(self, query: str) -> Any:
        response = httpx.post(self.url, json={"query": query}, timeout=60)
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body
        return body["data"]

    def up(self) -> bool:
        try:
            return self.graphql("{ version }")["version"] is not None
        except httpx.TransportError:
            return False

    def runs(self) -> list[dict[str, Any]]:
        query = "{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }"
        runs = self.graphql(query)["runsOrError"]["results"]
        return [{**run, "tags": {t["key"]: t["value"] for t in run["tags"]}} for run in runs]

    def check_evaluations(self, run_id: str) -> dict[str, bool]:
        """The asset check results recorded in the run's event log: check name to success."""
        query = (
            f'{{ logsForRun(runId: "{run_id}", limit: 5000) {{ ... on EventConnection {{'
            " events { __typename ... on AssetCheckEvaluationEvent {"
            " evaluation { checkName success } } } } } }"
        )
        events = self.graphql(query)["logsForRun"]["events"]
        return {
            e["evaluation"]["checkName"]: e["evaluation"]["success"]
            for e in events
            if e["__typename"] == "AssetCheckEvaluationEvent"
        }

    def steps_in_subprocesses(self, run_id: str) -> set[str]:
        """The steps of the run that the multiprocess executor ran each in a process of its
        own (a ``STEP_WORKER_STARTED`` event: "Executing step ... in subprocess")."""
        query = (
            f'{{ logsForRun(runId: "{run_id}", limit: 5000) {{ ... on EventConnection {{'
            " events { __typename ... on StepWorkerStartedEvent { stepKey } } } } }"
        )
        events = self.graphql(query)["logsForRun"]["events"]
        return {e["stepKey"] for e in events if e["__typename"] == "StepWorkerStartedEvent"}

    def wait_for_run(self, what: str, match: Any, *, timeout: float = 300) -> dict[str, Any]:
        def finished() -> dict[str, Any] | None:
            for run in self.runs():
                if match(run) and run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
                    return run
            return None

        run = self.processes.wait_for(what, finished, timeout=timeout, every=2)
        assert run["status"] == "SUCCESS", f"{run}\n{self.processes.tails()}"
        return run


@pytest.fixture(scope="module")
def dagster(
    e2e_env: dict[str, str], mail_world: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Dagster]:
    root = tmp_path_factory.mktemp("dagster")
    home, data, exports = root / "home", root / "data", root / "exports"
    for folder in (home, exports):
        folder.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        **e2e_env,
        **mail_world,
        "DAGSTER_HOME": str(home),
        "LISTHYGIENE_DAGSTER_DIR": str(data),
        "LISTHYGIENE_EXPORTS_DIR": str(exports),
    }
    port = free_port()
    processes = Processes(root / "logs", env)
    try:
        processes.start(
            "dagster-dev",
            ["dagster", "dev", "-f", DEFS, "-f", FLEET_DEFS, "-h", "127.0.0.1", "-p", str(port)],
        )
        running = Dagster(processes, port, data, exports)
        processes.wait_for("the Dagster web server", running.up, timeout=180)
        yield running
    finally:
        processes.stop_all()


@pytest.fixture(scope="module")
def sensor_run(dagster: Dagster) -> dict[str, Any]:
    """A new export lands in the watched folder and the sensor is turned on: the run it
    started, once finished."""
    with (REPO / "sample_data" / "crm_export.csv").open(newline="", encoding="utf-8") as sample:
        records = list(itertools.islice(csv.reader(sample), EXPORT_ROWS + 1))
    export = dagster.exports / EXPORT
    with export.open("w", newline="", encoding="utf-8") as out:
        csv.writer(out).writerows(records)
    # Copied a minute ago: the sensor takes a file once it has settled (10 s unchanged).
    past = time.time() - 60
    os.utime(export, (past, past))
    dagster.processes.run(["dagster", "sensor", "start", "crm_new_export", "-f", DEFS])
    return dagster.wait_for_run(
        "the sensor's run", lambda run: run["tags"].get("dagster/sensor_name") == "crm_new_export"
    )


def test_sensor_starts_a_run_for_a_new_export(dagster: Dagster, sensor_run: dict[str, Any]) -> None:
    """The run is the new file's partition; its outputs are on disk and every asset check of
    the verification ran and passed."""
    assert sensor_run["tags"]["dagster/partition"] == EXPORT
    folder = dagster.data / "runs" / "crm_exports" / EXPORT
    assert read_run_folder(folder)["rows"]["total"] == EXPORT_ROWS
    assert dagster.check_evaluations(sensor_run["runId"]) == dict.fromkeys(CHECKS, True)


def test_partition_materialised_from_the_cli(dagster: Dagster, sensor_run: dict[str, Any]) -> None:
    """``dagster asset materialize --select group:crm_exports --partition week-01.csv``: a run of
    that partition in the instance the web server shows, with its asset checks."""
    dagster.processes.run(
        [
            "dagster",
            "asset",
            "materialize",
            "-f",
            DEFS,
            "--select",
            "group:crm_exports",
            "--partition",
            EXPORT,
        ],
        timeout=300,
    )
    run = dagster.wait_for_run(
        "the CLI's run",
        lambda run: (
            run["runId"] != sensor_run["runId"] and run["tags"].get("dagster/partition") == EXPORT
        ),
        timeout=60,
    )
    assert dagster.check_evaluations(run["runId"]) == dict.fromkeys(CHECKS, True)
    folder = dagster.data / "runs" / "crm_exports" / EXPORT
    assert read_run_folder(folder)["rows"]["total"] == EXPORT_ROWS


def test_chunked_job_shares_one_politeness_budget(
    dagster: Dagster, fleet_world: FleetWorld, fleet_single: tuple[Path, dict[str, Any]]
) -> None:
    """Issue 26's fleet on Dagster: the chunked job launched onto the deployment (its run
    launcher, the multiprocess executor: one process a step) with the backend resource's
    ``shared_limits``: the split cuts the giant domain, the two chunk steps verify at once
    from one budget and meet no limit of the hosts, and the merge is one run's folder."""
    store = empty_redis(8)
    config = {
        "ops": {"fleet_chunks_split": {"config": {"source": str(fleet_world.source)}}},
        "resources": {
            "verification_backend": {
                "config": {
                    **{k: v for k, v in fleet_world.engine().items() if k != "rcpt_per_session"},
                    "engine": {"rcpt_per_session": fleet_world.engine()["rcpt_per_session"]},
                    "shared_limits": store,
                }
            }
        },
        "execution": {"config": {"multiprocess": {"max_concurrent": 2}}},
    }
    run_id = str(uuid.uuid4())
    before = fleet_world.defences()
    dagster.processes.run(
        [
            "dagster",
            "job",
            "launch",
            "-f",
            FLEET_DEFS,
            "-j",
            "fleet_chunks",
            "--run-id",
            run_id,
            "--config-json",
            json.dumps(config),
        ]
    )
    dagster.wait_for_run("the chunked job's run", lambda run: run["runId"] == run_id)
    assert_hosts_not_pushed(before, fleet_world.defences())

    folder = dagster.data / "fleet" / "fleet_chunks" / run_id
    chunks = [read_run_folder(folder / f"chunk-{i}") for i in range(2)]
    assert_split_cut_the_giant(folder / "chunks", chunks)
    # a process a chunk, both verifying at the same time
    steps = {f"fleet_chunks_verify_chunk[chunk_{i}]" for i in range(2)}
    assert steps <= dagster.steps_in_subprocesses(run_id)
    assert_chunks_overlapped(chunks)
    merged = read_run_folder(folder / "merged")
    assert_merged_polite(merged)
    assert_same_as_single(folder / "merged", merged, *fleet_single)
