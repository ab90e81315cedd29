"""A list in chunks: split by domain, each chunk cleaned on its own, merged into one run's folder.

The mail hosts judge the whole fleet: over several chunks a host must see no more SMTP sessions
than one run opens, and the merged folder must be the one a single run writes.
"""

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import listhygiene
from listhygiene.errors import QualityError
from listhygiene.pipeline.chunks import (
    ROW_COLUMN,
    SPLIT_MANIFEST,
    merge_chunks,
    plan_chunks,
    split_by_domain,
)
from listhygiene.pipeline.quality import STATUSES
from listhygiene.sandbox import Sandbox
from tests.conftest import empty_redis, sandbox_settings

#: Six domains, each on its own mail host, of different sizes; some role and full mailboxes.
SIZES = {"big.test": 24, "mid.test": 12, "small.test": 6, "tiny.test": 3, "one.test": 1}
WORLD: dict[str, Any] = {
    "domains": {
        **{
            domain: {
                "mx": [{"preference": 10, "host": f"mx.{domain}"}],
                "mailboxes": [f"user{i}" for i in range(size)] + ["info"],
                "full": ["full"],
            }
            for domain, size in SIZES.items()
        },
        "catchall.test": {
            "mx": [{"preference": 10, "host": "mx.catchall.test"}],
            "catch_all": True,
        },
    },
    "hosts": {f"mx.{domain}": {} for domain in [*SIZES, "catchall.test"]},
}
HOSTS = [f"mx.{domain}" for domain in [*SIZES, "catchall.test"]]


def contacts_csv(path: Path) -> Path:
    """Every mailbox, interleaved across domains, with duplicates, unknowns, blanks and typos."""
    lines = ["id,name,Email"]
    addresses = []
    for i in range(max(SIZES.values())):
        for domain, size in SIZES.items():
            if i < size:
                addresses.append(f"user{i}@{domain}")
                if i % 4 == 0:
                    addresses.append(f"nobody{i}@{domain}")
    for domain in SIZES:
        addresses += [f"info@{domain}", f"full@{domain}", f"USER0@{domain.upper()}"]
    addresses += [
        "a@catchall.test",
        "b@catchall.test",
        "",
        "N/A",
        "broken@@x.test",
        "broken@@x.test",
    ]
    lines += [f"{n},Person {n},{address}" for n, address in enumerate(addresses, start=1)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


def sessions(sandbox: Sandbox) -> dict[str, int]:
    return {host: sandbox.stats(host).connections for host in HOSTS}


def assert_same_as_one_run(
    out: Path, merged: dict[str, Any], single: Path, one: dict[str, Any]
) -> None:
    """The merged folder holds what one run's does: the same rows in each status's file in the
    same order, and the same counts in its summary."""
    for status in STATUSES:
        mine = pq.read_table(out / f"{status}.parquet").drop_columns(["response_time"])
        theirs = pq.read_table(single / f"{status}.parquet").drop_columns(["response_time"])
        assert mine.schema.names == theirs.schema.names
        assert mine.equals(theirs.cast(mine.schema)), status
    assert merged == json.loads((out / "summary.json").read_text())
    for key in ("rows", "credits", "verdicts"):
        assert merged[key] == one[key], key
    for key in ("distinct", "duplicate_rows", "verified"):
        assert merged["addresses"][key] == one["addresses"][key], key
    assert merged["top_domains"] == one["top_domains"]
    # the report's providers and suggestions are the one run's too
    assert merged["mx_providers"] == one["mx_providers"]
    assert merged["suggestions"] == one["suggestions"]
    assert merged["input"]["rows"] == one["input"]["rows"]
    assert merged["input"]["name"] == one["input"]["name"]
    assert merged["quality"]["passed"] is True


def reset(sandbox: Sandbox) -> None:
    for host in HOSTS:
        sandbox.stats(host).reset()


# --- the plan ---------------------------------------------------------------------------------


def test_plan_balances_domains_by_size() -> None:
    plan = plan_chunks({"a": 50, "b": 30, "c": 20, "d": 20, "e": 10, "f": 10}, 3)
    loads = [
        sum(
            n
            for d, n in {"a": 50, "b": 30, "c": 20, "d": 20, "e": 10, "f": 10}.items()
            if plan[d] == (chunk,)
        )
        for chunk in range(3)
    ]
    assert sorted(loads) == [40, 50, 50]
    assert plan == plan_chunks({"f": 10, "e": 10, "d": 20, "c": 20, "b": 30, "a": 50}, 3)


def test_a_giant_domain_stays_whole_in_its_own_chunk() -> None:
    plan = plan_chunks({"giant": 1000, "a": 10, "b": 10, "c": 10}, 2)
    assert plan["giant"] != plan["a"] == plan["b"] == plan["c"]


def test_with_a_shared_limit_a_giant_domain_is_cut_into_pieces_on_different_chunks() -> None:
    plan = plan_chunks({"giant": 1000, "a": 10, "b": 10, "c": 10}, 2, split_giants=True)
    assert sorted(plan["giant"]) == [0, 1]
    assert all(len(plan[d]) == 1 for d in "abc")
    # three chunks: the giant holds more than two even shares of 344 rows, so three pieces
    three = plan_chunks({"giant": 1000, "a": 10, "b": 10, "c": 10}, 3, split_giants=True)
    assert sorted(three["giant"]) == [0, 1, 2]
    # a domain of no more than an even share stays whole
    assert plan_chunks({"a": 50, "b": 50}, 2, split_giants=True) == {"a": (0,), "b": (1,)}


def test_domains_are_placed_by_expected_sessions() -> None:
    """Fifty one-row domains cost fifty sessions; a domain of 50 rows, two (25 recipients a
    session): the big one's chunk takes most of the small ones too, by sessions, not rows."""
    rows = {"big": 50, **{f"d{i}": 1 for i in range(50)}}
    plan = plan_chunks(rows, 2, per_session=25)
    big = plan["big"]
    with_big = [d for d, places in plan.items() if places == big and d != "big"]
    assert len(with_big) == 24  # 2 + 24 sessions against 26
    assert plan_chunks(rows, 2) != plan  # by rows, the big one would be alone


def test_chunks_must_be_positive() -> None:
    with pytest.raises(ValueError, match="chunks"):
        plan_chunks({"a": 1}, 0)


# --- the split --------------------------------------------------------------------------------


def test_split_puts_each_domain_in_one_chunk(tmp_path: Path) -> None:
    source = contacts_csv(tmp_path / "contacts.csv")
    paths = split_by_domain(source, tmp_path / "chunks", chunks=3)
    assert len(paths) == 3
    frames = [pd.read_parquet(path) for path in paths]
    homes: dict[str, set[int]] = {}
    for index, frame in enumerate(frames):
        cleaned = frame["Email"].fillna("").str.strip().str.lower()
        for cell in cleaned:
            key = cell.rsplit("@", 1)[-1] if cell.count("@") == 1 else cell
            homes.setdefault(key, set()).add(index)
    assert all(len(chunks) == 1 for chunks in homes.values()), homes
    # every row once, with its input row number, each chunk in input order
    numbers = sorted(n for frame in frames for n in frame[ROW_COLUMN])
    manifest = json.loads((tmp_path / "chunks" / SPLIT_MANIFEST).read_text())
    assert numbers == list(range(1, manifest["rows"] + 1))
    assert all(frame[ROW_COLUMN].is_monotonic_increasing for frame in frames)
    assert manifest["email_column"] == "Email"
    assert manifest["domains"] == 7
    # balanced by size: big.test (30 rows and more) alone, the others shared by two chunks
    sizes = sorted(len(frame) for frame in frames)
    assert sizes[-1] - sizes[0] < 20
    again = split_by_domain(source, tmp_path / "again", chunks=3)
    assert all(
        pd.read_parquet(a).equals(pd.read_parquet(b)) for a, b in zip(paths, again, strict=True)
    )


def test_split_with_a_shared_limit_cuts_the_giant_domain_by_address(tmp_path: Path) -> None:
    """big.test holds more than an even share of three chunks: with a shared limit it is cut in
    two chunks, an address (in any case) in one only; every other domain stays whole."""
    source = contacts_csv(tmp_path / "contacts.csv")
    paths = split_by_domain(source, tmp_path / "chunks", chunks=3, shared_limits="redis://x:1/0")
    frames = [pd.read_parquet(path) for path in paths]
    domains: dict[str, set[int]] = {}
    addresses: dict[str, set[int]] = {}
    for index, frame in enumerate(frames):
        for cell in frame["Email"].fillna("").str.strip().str.lower():
            addresses.setdefault(cell, set()).add(index)
            domains.setdefault(cell.rsplit("@", 1)[-1], set()).add(index)
    assert len(domains["big.test"]) == 2
    assert all(len(c) == 1 for d, c in domains.items() if d != "big.test"), domains
    assert all(len(c) == 1 for c in addresses.values())  # user0@ and USER0@ together
    manifest = json.loads((tmp_path / "chunks" / SPLIT_MANIFEST).read_text())
    assert manifest["split_domains"] == {"big.test": 2}
    numbers = sorted(n for frame in frames for n in frame[ROW_COLUMN])
    assert numbers == list(range(1, manifest["rows"] + 1))
    # "none" is no shared limit: the domain stays whole
    split_by_domain(source, tmp_path / "whole", chunks=3, shared_limits="none")
    assert json.loads((tmp_path / "whole" / SPLIT_MANIFEST).read_text())["split_domains"] == {}


def test_split_refuses_an_input_with_the_row_column(tmp_path: Path) -> None:
    path = tmp_path / "contacts.csv"
    path.write_text(f"{ROW_COLUMN},email\n1,a@b.test\n")
    with pytest.raises(ValueError, match=ROW_COLUMN):
        split_by_domain(path, tmp_path / "chunks", chunks=2)


# --- chunks cleaned and merged ------------------------------------------------------------------


def test_chunks_open_no_more_sessions_per_host_and_merge_to_one_runs_folder(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    source = contacts_csv(tmp_path / "contacts.csv")
    reset(sandbox)
    single = listhygiene.clean(source, tmp_path / "single", settings=sandbox_settings(sandbox))
    alone = sessions(sandbox)
    assert all(alone.values()), alone

    reset(sandbox)
    paths = split_by_domain(source, tmp_path / "chunks", chunks=3)
    summaries = [
        listhygiene.clean(path, tmp_path / f"chunk-{i}", settings=sandbox_settings(sandbox)).summary
        for i, path in enumerate(paths)
    ]
    fleet = sessions(sandbox)
    assert {h: n for h, n in fleet.items() if n > alone[h]} == {}, (alone, fleet)

    merged = merge_chunks(
        summaries, tmp_path / "merged", manifest=tmp_path / "chunks" / SPLIT_MANIFEST
    )
    out = tmp_path / "merged"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{s}.parquet" for s in STATUSES] + ["report.html", "summary.json"]
    )
    assert_same_as_one_run(out, merged, tmp_path / "single", single.summary)
    assert "big.test" in (out / "report.html").read_text()
    # what the fleet's sessions cost the hosts: the chunks' added up, the peak the largest
    polite = [s["politeness"] for s in summaries]
    assert all(p["sessions"] > 0 for p in polite), polite
    assert merged["politeness"] == {
        "sessions": sum(p["sessions"] for p in polite),
        "max_sessions_one_host": max(p["max_sessions_one_host"] for p in polite),
        "limits_met": 0,
        "bans": 0,
    }


#: Shared hosting: a giant domain and four small ones on one host that answers each command
#: 100 ms late, so that the sessions of two chunks cleaned at once overlap.
HOSTED = ("giant.test", *(f"small{i}.test" for i in range(4)))
HOSTED_WORLD: dict[str, Any] = {
    "domains": {
        domain: {
            "mx": [{"preference": 10, "host": "mx.hosting.test"}],
            "mailboxes": [f"user{i}" for i in range(40)],
        }
        for domain in HOSTED
    },
    "hosts": {"mx.hosting.test": {"latency_ms": 100}},
}


@pytest.mark.parametrize("shared", [True, False], ids=["shared store", "no store"])
def test_chunks_sharing_a_limit_split_the_giant_and_still_merge_to_one_runs_folder(
    tmp_path: Path, shared: bool
) -> None:
    """With a shared limit (the machine's Redis) the giant domain is cut across both chunks;
    the chunks, cleaned at once, each with a piece of it and two small domains on the same
    host, hold no more sessions to that host at once than one run may (2), where without the
    store each holds its own 2; the merged folder is one run's either way."""
    store = empty_redis(12)
    source = tmp_path / "hosted.csv"
    rows = [f"user{i}@giant.test" for i in range(40)]
    rows += [f"user{i}@{d}" for d in HOSTED[1:] for i in range(6)] + ["nobody@giant.test"]
    source.write_text("email\n" + "\n".join(rows) + "\n")
    with Sandbox(HOSTED_WORLD) as sandbox:
        single = listhygiene.clean(source, tmp_path / "single", settings=sandbox_settings(sandbox))
        paths = split_by_domain(source, tmp_path / "chunks", chunks=2, shared_limits=store)
        split = json.loads((tmp_path / "chunks" / SPLIT_MANIFEST).read_text())
        assert split["split_domains"] == {"giant.test": 2}
        # three recipients a session: a chunk's domains on the host want 2 sessions at once
        settings = sandbox_settings(sandbox).model_copy(
            update={"shared_limits": store if shared else None, "rcpt_per_session": 3}
        )
        host = sandbox.stats("mx.hosting.test")
        host.reset()
        with ThreadPoolExecutor(len(paths)) as pool:
            summaries = list(
                pool.map(
                    lambda i: (
                        listhygiene.clean(
                            paths[i], tmp_path / f"chunk-{i}", settings=settings, quality="warn"
                        ).summary
                    ),
                    range(len(paths)),
                )
            )
        if shared:
            assert 0 < host.max_held <= settings.host_concurrency == 2
        else:
            assert host.max_held > settings.host_concurrency  # what the store prevents
    merged = merge_chunks(
        summaries, tmp_path / "merged", manifest=tmp_path / "chunks" / SPLIT_MANIFEST
    )
    assert_same_as_one_run(tmp_path / "merged", merged, tmp_path / "single", single.summary)
    assert merged["politeness"]["limits_met"] == 0


def test_a_broken_chunk_fails_the_merged_checks_and_publishes_nothing(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    source = contacts_csv(tmp_path / "contacts.csv")
    paths = split_by_domain(source, tmp_path / "chunks", chunks=2)
    summaries = [
        listhygiene.clean(
            path, tmp_path / f"chunk-{i}", settings=sandbox_settings(sandbox), check_smtp=False
        ).summary
        for i, path in enumerate(paths)
    ]
    valid = tmp_path / "chunk-0" / "valid.parquet"
    table = pq.read_table(valid)
    pq.write_table(table.slice(1), valid)  # the chunk lost its first valid row
    lost = table.column(ROW_COLUMN)[0].as_py()
    with pytest.raises(QualityError) as raised:
        merge_chunks(summaries, tmp_path / "merged", manifest=tmp_path / "chunks" / SPLIT_MANIFEST)
    assert f"row {lost} is missing" in str(raised.value)
    assert not (tmp_path / "merged" / "summary.json").exists()
    warned = merge_chunks(
        [tmp_path / "chunk-0", tmp_path / "chunk-1"],
        tmp_path / "merged",
        manifest=tmp_path / "chunks" / SPLIT_MANIFEST,
        quality="warn",
    )
    assert warned["quality"]["passed"] is False
    assert (tmp_path / "merged" / "summary.json").exists()


def test_merge_refuses_outputs_without_row_numbers(sandbox: Sandbox, tmp_path: Path) -> None:
    source = contacts_csv(tmp_path / "contacts.csv")
    run = listhygiene.clean(
        source, tmp_path / "run", settings=sandbox_settings(sandbox), check_smtp=False
    )
    with pytest.raises(ValueError, match=f"no {ROW_COLUMN} column"):
        merge_chunks([run.summary], tmp_path / "merged")
    assert not (tmp_path / "merged" / "summary.json").exists()


def test_politeness_of_several_parts_adds_up() -> None:
    """Attempts of a resumed run and chunks of a merged one: counts add up, the peak is the
    largest; a part that cannot know (a remote backend: None) or a summary written before the
    field existed counts zeros, so the four keys are always there."""
    from listhygiene.pipeline.summary import run_politeness

    zeros = {"sessions": 0, "max_sessions_one_host": 0, "limits_met": 0, "bans": 0}
    assert run_politeness() == zeros
    assert run_politeness(None, {}, {"sessions": "many", "bans": True}) == zeros
    assert run_politeness(
        {"sessions": 5, "max_sessions_one_host": 3, "limits_met": 1, "bans": 1},
        None,
        {"sessions": 2, "max_sessions_one_host": 4},
    ) == {"sessions": 7, "max_sessions_one_host": 4, "limits_met": 1, "bans": 1}


#: What each chunk of ``test_merged_rows_keep_the_input_order`` says its sessions cost.
CHUNK_POLITENESS = (
    {"sessions": 3, "max_sessions_one_host": 2, "limits_met": 1, "bans": 0},
    {"sessions": 4, "max_sessions_one_host": 1, "limits_met": 2, "bans": 1},
)


def test_merged_rows_keep_the_input_order(tmp_path: Path) -> None:
    # two chunks whose rows interleave in the input: the merge restores the input's order
    for index, numbers in enumerate(([1, 4, 5, 9], [2, 3, 6, 7, 8, 10])):
        folder = tmp_path / f"chunk-{index}"
        folder.mkdir()
        for status in STATUSES:
            rows = numbers if status == "valid" else []
            pq.write_table(
                pa.table(
                    {
                        "id": pa.array([f"r{n}" for n in rows], pa.string()),
                        "email": pa.array([f"x{n}@a.test" for n in rows], pa.string()),
                        "status": pa.array([status] * len(rows), pa.string()),
                        "score": pa.array([0.9] * len(rows), pa.float64()),
                        ROW_COLUMN: pa.array(rows, pa.int64()),
                    }
                ),
                folder / f"{status}.parquet",
                row_group_size=2,
            )
        summary = {
            "output": {"folder": str(folder)},
            "rows": {"total": len(numbers), "by_status": {"valid": len(numbers)}},
            "politeness": CHUNK_POLITENESS[index],
        }
        (folder / "summary.json").write_text(json.dumps(summary))
    merged = merge_chunks([tmp_path / "chunk-0", tmp_path / "chunk-1"], tmp_path / "merged")
    assert merged["quality"]["passed"], merged["quality"]
    valid = pq.read_table(tmp_path / "merged" / "valid.parquet")
    assert valid.column("id").to_pylist() == [f"r{n}" for n in range(1, 11)]
    assert ROW_COLUMN not in valid.column_names
    # counts add up (a resumed chunk's attempts already did), the peak is the largest
    assert merged["politeness"] == {
        "sessions": 7,
        "max_sessions_one_host": 2,
        "limits_met": 3,
        "bans": 1,
    }
    report = (tmp_path / "merged" / "report.html").read_text()
    assert "Mail hosts said we went too fast" in report
