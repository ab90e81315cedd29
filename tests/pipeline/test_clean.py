"""``clean`` end to end: real files in, the sandbox for DNS and SMTP, Parquet and a report out."""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import listhygiene
from listhygiene.pipeline.backends import KEY, Backend, JobRef, LocalBackend
from listhygiene.pipeline.outputs import OutputError
from listhygiene.pipeline.report import politeness_line
from listhygiene.pipeline.run import STATUSES, QualityError
from listhygiene.results import arrow_schema
from listhygiene.sandbox import Sandbox
from tests.conftest import sandbox_settings, write_contacts


def mx(host: str) -> list[dict]:
    return [{"preference": 10, "host": host}]


WORLD = {
    "domains": {
        "acme.test": {
            "mx": mx("mx.acme.test"),
            "mailboxes": ["alice", "bob", "info"],
            "full": ["carol"],
        },
        "catchall.test": {"mx": mx("mx.catchall.test"), "catch_all": True},
        "grey.test": {"mx": mx("mx.grey.test"), "mailboxes": ["gina"]},
        "slow.test": {"mx": mx("mx.slow.test"), "mailboxes": [f"person{i}" for i in range(60)]},
        "mailinator.com": {"mx": mx("mx.mailinator.com"), "catch_all": True},
    },
    "hosts": {
        "mx.acme.test": {},
        "mx.catchall.test": {},
        "mx.grey.test": {"greylist_delay_ms": 600},
        "mx.slow.test": {"latency_ms": 150, "max_rcpt_per_connection": 2},
        "mx.mailinator.com": {},
    },
}

CSV = """id,name,Email,notes
1,Alice,alice@acme.test,first
2,Alice again, ALICE@Acme.Test ,"duplicate, other case"
3,Bob,mailto:bob@acme.test,
4,Nobody,ghost@acme.test,bounces
5,Info,info@acme.test,role
6,Carol,carol@acme.test,full
7,Anyone,anyone@catchall.test,catch-all
8,Temp,temp@mailinator.com,disposable
9,Gina,gina@grey.test,greylisted
10,Blank,,no address
11,Placeholder,N/A,placeholder
12,Typo,alice@@acme.test,broken syntax
"""


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


@pytest.fixture
def contacts(tmp_path: Path) -> Path:
    return write_contacts(tmp_path, CSV)


def read(out: Path, status: str) -> pd.DataFrame:
    return pq.read_table(out / f"{status}.parquet").to_pandas()


def test_every_row_lands_in_exactly_one_status_file(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = listhygiene.clean(
        contacts, out, settings=sandbox_settings(sandbox, mail_from="a@v.test")
    )
    frames = {s: read(out, s) for s in STATUSES}
    assert set(os.listdir(out)) >= {f"{s}.parquet" for s in STATUSES} | {
        "summary.json",
        "report.html",
    }
    assert sum(len(f) for f in frames.values()) == 12
    ids = sorted((i for f in frames.values() for i in f["id"]), key=int)
    assert ids == [str(i) for i in range(1, 13)]  # each row once, none lost, none doubled
    where = {row_id: s for s, f in frames.items() for row_id in f["id"]}
    assert where == {
        "1": "valid",
        "2": "valid",
        "3": "valid",
        "4": "invalid",
        "5": "role",
        "6": "risky",
        "7": "catchall",
        "8": "disposable",
        "9": "unknown",
        "10": "invalid",
        "11": "invalid",
        "12": "invalid",
    }
    valid = frames["valid"]
    # the input's own columns first, then the result columns (Email clashes with nothing)
    assert list(valid.columns[:4]) == ["id", "name", "Email", "notes"]
    assert list(valid.columns[4:]) == arrow_schema().names
    assert set(valid["email"]) == {"alice@acme.test", "bob@acme.test"}
    assert list(valid.loc[valid["id"] == "2", "Email"]) == [" ALICE@Acme.Test "]  # kept as given
    for status, frame in frames.items():
        assert set(frame["status"]) <= {status}
    blank = frames["invalid"].set_index("id").loc["10"]
    assert (blank["reason"], blank["credits_used"]) == ("invalid_syntax", 0)
    summary = json.loads((out / "summary.json").read_text())
    assert summary == result.summary
    assert summary["rows"]["total"] == 12
    assert summary["rows"]["by_status"] == {s: len(frames[s]) for s in STATUSES}
    assert summary["rows"]["empty_email"] == 2
    assert summary["addresses"]["distinct"] == 9  # alice twice; blank and N/A are not addresses
    assert summary["addresses"]["duplicate_rows"] == 1
    assert summary["quality"]["passed"] is True
    assert summary["input"]["email_column"] == "Email"
    # credits: one per distinct address verified, unknown free, blank cells never verified
    paid = pd.concat(frames.values()).query("Email.notna()").drop_duplicates("email")
    assert summary["credits"]["used"] == int(paid["credits_used"].sum())
    assert summary["credits"]["used"] == 8  # 9 addresses, the greylisted unknown one free
    assert result.counts["valid"] == 3
    assert len(result["valid"]) == 3
    # what the sessions cost the hosts: a friendly world (greylisting and a cap per session are
    # not limits met) says nothing of going too far
    polite = summary["politeness"]
    assert set(polite) == {"sessions", "max_sessions_one_host", "limits_met", "bans"}
    assert all(isinstance(n, int) for n in polite.values())
    assert polite["sessions"] > 0
    assert 1 <= polite["max_sessions_one_host"] <= polite["sessions"]
    assert polite["limits_met"] == polite["bans"] == 0
    report = (out / "report.html").read_text()
    assert politeness_line(polite) in report
    assert "politeness-warning" not in report


def test_second_pass_verifies_temporary_unknowns_again(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = listhygiene.clean(
        contacts,
        out,
        settings=sandbox_settings(sandbox, mail_from="b@v.test"),
        retry_unknown_after=0.8,
    )
    frames = {s: read(out, s) for s in STATUSES}
    assert "9" in set(frames["valid"]["id"])  # greylisted at first, accepted on the second pass
    assert result.summary["addresses"]["retried"] == 1


def test_without_smtp(sandbox: Sandbox, contacts: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = listhygiene.clean(contacts, out, settings=sandbox_settings(sandbox), check_smtp=False)
    valid = read(out, "valid")
    assert set(valid["id"]) == {"1", "2", "3", "4", "6", "7", "9"}  # no mailbox probed
    assert set(valid["score"]) == {0.9}
    assert set(valid["smtp_check"]) == {False}
    assert result.summary["backend"] == {"name": "local", "check_smtp": False}
    assert result.summary["politeness"] == {
        "sessions": 0,
        "max_sessions_one_host": 0,
        "limits_met": 0,
        "bans": 0,
    }


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_the_quality_worker_variable_chooses_where_gx_is_imported(
    sandbox: Sandbox, contacts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    from listhygiene.pipeline import runner

    asked: list[bool] = []

    def recording_warm_up(*, process: bool = True) -> object:
        asked.append(process)
        return real_warm_up(process=process)

    real_warm_up = runner.warm_up
    monkeypatch.setattr(runner, "warm_up", recording_warm_up)
    monkeypatch.setenv("LISTHYGIENE_QUALITY_WORKER", kind)
    result = listhygiene.clean(
        contacts, tmp_path / "out", settings=sandbox_settings(sandbox), check_smtp=False
    )
    assert asked == [kind == "process"]
    assert result.summary["quality"]["passed"]


def test_column_names_that_clash_with_result_columns(sandbox: Sandbox, tmp_path: Path) -> None:
    path = tmp_path / "clash.csv"
    path.write_text("email,status,score\nalice@acme.test,customer,7\n")
    out = tmp_path / "out"
    listhygiene.clean(path, out, settings=sandbox_settings(sandbox), check_smtp=False)
    frame = read(out, "valid")
    assert list(frame.columns[:3]) == ["email", "status", "score"]
    assert (frame.loc[0, "status"], frame.loc[0, "result_status"]) == ("customer", "valid")
    assert frame.loc[0, "result_email"] == "alice@acme.test"


def test_dataframe_in_frames_out(sandbox: Sandbox) -> None:
    data = pd.DataFrame({"who": ["a", "b"], "mail": ["alice@acme.test", "ghost@acme.test"]})
    result = listhygiene.clean(data, settings=sandbox_settings(sandbox))
    assert list(result["valid"]["who"]) == ["a"]
    assert list(result["invalid"]["reason"]) == ["mailbox_not_found"]
    assert Path(result.report).exists()


def test_output_to_a_filesystem_url(sandbox: Sandbox, contacts: Path) -> None:
    import fsspec

    result = listhygiene.clean(
        contacts,
        "memory://listhygiene-test/out",
        settings=sandbox_settings(sandbox),
        check_smtp=False,
    )
    fs = fsspec.filesystem("memory")
    names = {p.rsplit("/", 1)[-1] for p in fs.ls("/listhygiene-test/out", detail=False)}
    assert names >= {f"{s}.parquet" for s in STATUSES} | {"summary.json", "report.html"}
    assert len(result["valid"]) == 7


def test_unwritable_output_folder_fails_before_any_work(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(OutputError, match="a-file"):
        listhygiene.clean(contacts, blocker / "out", settings=sandbox_settings(sandbox))


class _BrokenBackend(Backend):
    """A backend that answers with a status no file exists for."""

    name = "broken"

    def __init__(self, inner: LocalBackend) -> None:
        self.inner = inner

    async def submit(self, addresses: pa.Array, *, check_smtp: bool) -> JobRef:
        return await self.inner.submit(addresses, check_smtp=check_smtp)

    async def results(self, job: JobRef) -> AsyncIterator[pa.Table]:
        async for table in self.inner.results(job):
            status = table.column("status").to_pylist()
            status[0] = "excellent"
            index = table.schema.get_field_index("status")
            yield table.set_column(index, "status", pa.array(status, pa.string()))


def test_a_failing_quality_check_fails_the_run_and_publishes_nothing(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    backend = _BrokenBackend(LocalBackend(sandbox_settings(sandbox)))
    with pytest.raises(QualityError, match="rows_in_exactly_one_output"):
        listhygiene.clean(contacts, out, backend=backend, check_smtp=False)
    assert not (out / "summary.json").exists()
    assert not list(out.glob("*.parquet"))
    warned = listhygiene.clean(
        contacts,
        out,
        backend=_BrokenBackend(LocalBackend(sandbox_settings(sandbox))),
        check_smtp=False,
        quality="warn",
    )
    assert warned.summary["quality"]["passed"] is False
    assert (out / "summary.json").exists()


class _DiesAfterOneTable(LocalBackend):
    """The local engine, killed (as by an error) once its first results are saved."""

    async def results(self, job: JobRef) -> AsyncIterator[pa.Table]:
        async for table in super().results(job):
            yield table
            raise RuntimeError("the worker died")


def test_a_resumed_run_adds_up_what_each_attempt_cost_the_hosts(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    path = tmp_path / "slow.csv"
    path.write_text("Email\n" + "".join(f"person{i}@slow.test\n" for i in range(10)))
    out = tmp_path / "out"
    first = _DiesAfterOneTable(sandbox_settings(sandbox), flush_every=2)
    with pytest.raises(RuntimeError, match="the worker died"):
        listhygiene.clean(path, out, backend=first)
    # what the attempt's sessions cost, kept for the rerun
    before = json.loads((out / ".listhygiene" / "manifest.json").read_text())["politeness"]
    assert 0 < before["sessions"] <= first.engine.politeness["sessions"]
    second = LocalBackend(sandbox_settings(sandbox))
    result = listhygiene.clean(path, out, backend=second)
    assert result.summary["addresses"]["resumed"] is True
    now = second.engine.politeness
    assert now["sessions"] > 0  # the rerun verified what the first attempt had not saved
    assert result.summary["politeness"] == {
        "sessions": before["sessions"] + now["sessions"],
        "max_sessions_one_host": max(before["max_sessions_one_host"], now["max_sessions_one_host"]),
        "limits_met": 0,
        "bans": 0,
    }


def _cli(env: dict[str, str], *args: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "listhygiene.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )  # type: ignore[call-overload]


@pytest.mark.timeout(300)  # two CLI runs over the SMTP sandbox: minutes on a busy CI machine
def test_a_killed_run_resumes_without_repeating_work(sandbox: Sandbox, tmp_path: Path) -> None:
    path = tmp_path / "slow.csv"
    path.write_text("Email\n" + "".join(f"person{i}@slow.test\n" for i in range(60)))
    env = {
        **os.environ,
        **sandbox.engine_environment(),
        "LISTHYGIENE_HELO": "verifier.test",
        "LISTHYGIENE_RETRY_DELAYS": "",
    }
    out = tmp_path / "out"
    stats = sandbox.stats("mx.slow.test")
    stats.reset()
    first = _cli(env, "clean", str(path), "--out", str(out), start_new_session=True)
    parts = out / ".listhygiene" / "results"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(parts.glob("part-*.parquet"))) < 2:
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert not (out / "summary.json").exists()
    # what the killed run kept (a part it was writing when killed is a .tmp file: not kept)
    kept = sorted(parts.glob("part-*.parquet"))
    saved = {key for part in kept for key in pq.read_table(part).column(KEY).to_pylist()}
    asked_before = len(stats.recipients)
    second = _cli(env, "clean", str(path), "--out", str(out))
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["addresses"]["resumed"] is True
    assert summary["addresses"]["reused"] > 0
    assert summary["addresses"]["reused"] + summary["addresses"]["verified"] == 60
    assert not (out / ".listhygiene").exists()  # published: no work state among the outputs
    # what the first run had saved was not asked again
    assert len(saved) >= summary["addresses"]["reused"]
    asked_again = {r for r in stats.recipients[asked_before:] if not r.startswith("lh-")}
    first_run_saved = saved - asked_again
    assert len(first_run_saved) == summary["addresses"]["reused"]
    assert len(asked_again) == summary["addresses"]["verified"]
    # and the outputs are those of an uninterrupted run
    fresh = tmp_path / "fresh"
    done = _cli(env, "clean", str(path), "--out", str(fresh))
    done.communicate(timeout=120)
    for status in STATUSES:
        a = read(out, status).drop(columns=["response_time"]).sort_values("Email")
        b = read(fresh, status).drop(columns=["response_time"]).sort_values("Email")
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
    assert summary["rows"]["by_status"]["valid"] == 60


def test_cli_errors_name_the_input(sandbox: Sandbox, tmp_path: Path) -> None:
    env = {**os.environ, **sandbox.engine_environment()}
    no_column = tmp_path / "people.csv"
    no_column.write_text("name,city\nAlice,Paris\nBob,Rome\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    corrupt = tmp_path / "broken.xlsx"
    corrupt.write_bytes(b"PK\x03\x04 not really a zip file")
    for path in (no_column, empty, corrupt, tmp_path / "missing.csv"):
        run = _cli(env, "clean", str(path), "--out", str(tmp_path / "out"))
        _, err = run.communicate(timeout=60)
        assert run.returncode == 3, (path, err)  # the input cannot be read
        assert str(path.name) in err
        assert "Traceback" not in err
    assert not (tmp_path / "out" / "summary.json").exists()


def test_changed_settings_start_afresh_instead_of_reusing_results(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    data = pd.DataFrame({"email": ["alice@acme.test"]})
    out = tmp_path / "out"
    wrong = listhygiene.clean(
        data, out, settings=sandbox_settings(sandbox, allow_private_mx=False), check_smtp=False
    )
    assert wrong.counts["invalid"] == 1  # loopback mail hosts refused
    right = listhygiene.clean(data, out, settings=sandbox_settings(sandbox), check_smtp=False)
    assert right.counts["valid"] == 1
    assert right.summary["addresses"]["resumed"] is False


def test_check_smtp_follows_the_engine_settings_unless_given(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    data = pd.DataFrame({"email": ["ghost@acme.test"]})
    off = listhygiene.clean(
        data, tmp_path / "a", settings=sandbox_settings(sandbox, check_smtp=False)
    )
    assert off.counts["valid"] == 1  # not probed
    assert off.summary["backend"]["check_smtp"] is False
    on = listhygiene.clean(
        data, tmp_path / "b", settings=sandbox_settings(sandbox, check_smtp=False), check_smtp=True
    )
    assert on.counts["invalid"] == 1
    assert on.passed


# -- what a run leaves behind (issue 14, item 7; docs/pipeline.md, "Resume") --------------------

OUTPUTS = {f"{s}.parquet" for s in STATUSES} | {"summary.json", "report.html"}


def test_a_finished_run_leaves_only_its_outputs(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    listhygiene.clean(contacts, out, settings=sandbox_settings(sandbox), check_smtp=False)
    assert {p.name for p in out.iterdir()} == OUTPUTS  # no .listhygiene work folder


def test_a_finished_run_to_a_url_leaves_no_work_folder_in_the_cache(
    sandbox: Sandbox, contacts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fsspec

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    url = "memory://listhygiene-test/finished"
    listhygiene.clean(contacts, url, settings=sandbox_settings(sandbox), check_smtp=False)
    names = {p.rsplit("/", 1)[-1] for p in fsspec.filesystem("memory").ls(url, detail=False)}
    assert names == OUTPUTS
    runs = tmp_path / "cache" / "listhygiene" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_a_failed_run_keeps_its_work_folder_for_the_rerun(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    backend = _BrokenBackend(LocalBackend(sandbox_settings(sandbox)))
    with pytest.raises(QualityError):
        listhygiene.clean(contacts, out, backend=backend, check_smtp=False)
    assert (out / ".listhygiene" / "manifest.json").exists()
    assert not (out / "summary.json").exists()


def test_without_an_output_folder_the_temporary_folder_lives_as_long_as_the_result(
    sandbox: Sandbox, contacts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    result = listhygiene.clean(contacts, settings=sandbox_settings(sandbox), check_smtp=False)
    folder = Path(result.out)
    assert folder.parent == tmp_path / "tmp"
    assert {p.name for p in folder.iterdir()} == OUTPUTS
    assert len(result["valid"]) == 7  # read from the folder, lazily
    del result
    gc.collect()
    assert not folder.exists()
    closed = listhygiene.clean(contacts, settings=sandbox_settings(sandbox), check_smtp=False)
    with closed:
        assert len(closed["valid"]) == 7
    assert not Path(closed.out).exists()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_without_an_output_folder_a_failed_run_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from listhygiene.pipeline.sources import SourceError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    frame = pd.DataFrame({"name": ["Ann"], "city": ["Rome"]})  # no email column
    with pytest.raises(SourceError):
        listhygiene.clean(frame, check_smtp=False, dns_server="127.0.0.1:9")
    assert list(tmp_path.iterdir()) == []
