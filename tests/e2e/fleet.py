"""The fleet of issue 26 end to end: one list cleaned in two chunks by two worker processes at
once (Airflow's mapped chunks on two Celery workers, Dagster's chunked job on the multiprocess
executor), their engines sharing one politeness budget in the machine's Redis, against mail
hosts that count a client's connections (``fleet_world.json``, a sandbox of its own).

A process keeps to two sessions a host (``host_concurrency``) and two to Yahoo; the giant
domain's long session and the small domains hosted beside it (shared hosting, which a split by
domain cannot see) give each process two at once on ``mx.hosting.test``. Without the shared
limit the two processes together open three or four there (the host greets the third with
``421 too many connections``; checked: one 421 in each of the Airflow and Dagster runs with
the limit taken out, and the giant was not cut) and may open up to four to Yahoo (a ban past
two); with it the fleet holds two. What the hosts said is read from the sandbox's
``defences.json`` (docs/sandbox.md, "What the hosts said"), which the separate sandbox process
writes; the merged folder is compared with one ``listhygiene clean`` run of the whole list.
"""

import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from listhygiene.pipeline.quality import STATUSES

WORLD = Path(__file__).with_name("fleet_world.json")
#: The giant domain (more than half the list) and the mail host it shares with three others.
GIANT = "giant.test"
HOST = "mx.hosting.test"
#: The host's ``max_connections_per_client``, Yahoo's ``max_concurrent`` in the world, and the
#: engine's budgets (``host_concurrency``, Yahoo's ``concurrency`` in provider_limits.toml).
LIMIT = 2
#: Three recipients a transaction on a host that does not pipeline: a chunk's sessions on the
#: shared host last seconds (10 to 20 s in all), so the two chunks' overlap even when one
#: worker starts its task seconds after the other.
RCPT_PER_SESSION = 3


def write_list(path: Path) -> int:
    """The list the fleet cleans: the giant's 62 mailboxes, a few unknown and a disabled one, and
    one address twice in another case, interleaved with the other domains' rows (full, role,
    catch-all, unknown, a malformed row); returns its row count."""
    giant = [f"user{i}@{GIANT}" for i in range(62)]
    giant[10:10] = ["nobody0@giant.test", "gone@giant.test"]
    giant[40:40] = ["nobody1@giant.test", "USER7@Giant.Test"]
    giant.append("nobody2@giant.test")
    others = [
        *(f"a{i}@alpha.test" for i in range(5)),
        "nobody@alpha.test",
        *(f"b{i}@beta.test" for i in range(5)),
        "info@beta.test",
        *(f"c{i}@gamma.test" for i in range(5)),
        "full@gamma.test",
        "x@delta.test",
        "y@delta.test",
        *(f"e{i}@epsilon.test" for i in range(4)),
        "not-an-address",
        *(f"{p}{i}@{d}" for p, d in [("y", "yahoo.com"), ("ym", "ymail.com")] for i in range(2)),
        *(f"{p}{i}@{d}" for p, d in [("ao", "aol.com"), ("ai", "aim.com")] for i in range(2)),
        "nobody@yahoo.com",
        "nobody@aol.com",
    ]
    rows: list[str] = []
    for i in range(max(len(giant), len(others))):
        rows += [*giant[i : i + 1], *others[i : i + 1]]
    path.write_text("id,email\n" + "".join(f"{n},{e}\n" for n, e in enumerate(rows, 1)))
    assert sum(r.lower().endswith(f"@{GIANT}") for r in rows) > len(rows) / 2
    return len(rows)


@dataclass(frozen=True)
class FleetWorld:
    """The running fleet sandbox and the list to clean."""

    #: What ``sandbox up`` exported (``LISTHYGIENE_DNS_SERVER``, ``..._SMTP_PORT``, ...).
    settings: dict[str, str]
    #: Its state folder, where the daemon keeps ``defences.json``.
    state: Path
    source: Path
    rows: int

    def engine(self) -> dict[str, Any]:
        """The engine settings pointing at this sandbox, as connection extras or resource
        config (over the deployment's ``LISTHYGIENE_*``, which point at the sample world)."""
        return {
            "dns_server": self.settings["LISTHYGIENE_DNS_SERVER"],
            "smtp_port": int(self.settings["LISTHYGIENE_SMTP_PORT"]),
            "allow_private_mx": True,
            "rcpt_per_session": RCPT_PER_SESSION,
        }

    def defences(self, *, timeout: float = 30) -> dict[str, Any]:
        """The daemon's defence report, once settled: the daemon rewrites it at most once a
        second while it changes, so two equal reads 1.5 s apart are the last word."""
        path = self.state / "defences.json"
        deadline = time.monotonic() + timeout
        last = path.read_text()
        while True:
            time.sleep(1.5)
            text = path.read_text()
            if text == last or time.monotonic() > deadline:
                return dict(json.loads(text))
            last = text


def assert_hosts_not_pushed(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Between two defence reports no host said we went too far: no ``421 too many
    connections`` from the shared host and no Yahoo ban; neither the shared host nor Yahoo ever
    counted more of our connections at once than its limit (``max_held``, the count its
    per-client limit judges, over the sandbox's life: every run of the session); and the run
    did talk to the shared host.

    Not ``max_active``: it counts a connection from accept to the server's handling of its
    close, so a client that hangs up and connects again at once shows one more for a few
    microseconds (docs/sandbox.md)."""
    host = after["hosts"][HOST]
    assert host["connections"] > before["hosts"].get(HOST, {}).get("connections", 0)
    assert host["max_held"] <= LIMIT, host
    assert after["providers"]["yahoo"]["max_active"] <= LIMIT, after["providers"]
    new_events = {
        name: stats["events"][len(before["hosts"].get(name, {}).get("events", [])) :]
        for name, stats in after["hosts"].items()
    }
    assert after["limits_met"] == before["limits_met"], new_events
    assert after["bans"] == before["bans"], new_events


def assert_merged_polite(merged: dict[str, Any]) -> None:
    """The merged summary's ``politeness``: sessions opened, no limit met, no ban."""
    politeness = merged["politeness"]
    assert politeness["sessions"] > 0, politeness
    assert politeness["limits_met"] == 0, politeness
    assert politeness["bans"] == 0, politeness
    assert politeness["max_sessions_one_host"] <= LIMIT, politeness


def assert_chunks_overlapped(chunks: list[dict[str, Any]]) -> None:
    """The chunks' verification phases ran at the same time (the budget was shared by two
    processes at work, not taken in turns), as their summaries' timings tell."""
    windows = []
    for summary in chunks:
        timings = summary["timings"]
        start = datetime.fromisoformat(timings["started_at"].replace("Z", "+00:00"))
        start += timedelta(seconds=timings["seconds"]["read"])
        windows.append((start, start + timedelta(seconds=timings["seconds"]["verify"])))
    assert max(s for s, _ in windows) < min(e for _, e in windows), windows


def assert_split_cut_the_giant(chunks_folder: Path, chunks: list[dict[str, Any]]) -> None:
    """``split.json`` names the giant cut in two, and each chunk verified a piece of it."""
    split = json.loads((chunks_folder / "split.json").read_text())
    assert split["split_domains"] == {GIANT: 2}, split
    for summary in chunks:
        assert GIANT in json.dumps(summary["top_domains"]), summary["top_domains"]


def assert_same_as_single(
    merged_folder: Path, merged: dict[str, Any], single_folder: Path, single: dict[str, Any]
) -> None:
    """The merged folder holds what one run of the whole list does: every status's file the
    same rows, columns and order (the response time aside), and the same counts."""
    for status in STATUSES:
        mine = pq.read_table(merged_folder / f"{status}.parquet").drop_columns(["response_time"])
        theirs = pq.read_table(single_folder / f"{status}.parquet").drop_columns(["response_time"])
        assert mine.schema.names == theirs.schema.names, status
        assert mine.to_pylist() == theirs.to_pylist(), status
    for key in ("rows", "credits", "verdicts", "top_domains"):
        assert merged[key] == single[key], key
    for key in ("distinct", "duplicate_rows", "verified"):
        assert merged["addresses"][key] == single["addresses"][key], key
    assert merged["quality"]["passed"] is True
