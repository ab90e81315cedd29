"""Each export shape's reader on its sample file (sample_data/feedback_*), and the readers' ways
with bad rows: counted by reason, never raised (docs/feedback.md)."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from listhygiene.errors import InputError
from listhygiene.pipeline.feedback import FeedbackInputError, detect_format, read_events

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


def events_of(path: Path | str, **options: str) -> tuple[list[tuple[str, str, str | None]], object]:
    found, tables = read_events(path, **options)
    rows = [(r["address"], r["event"], r["bounce"]) for t in tables for r in t.to_pylist()]
    return rows, found


@pytest.mark.parametrize("shape", ["sendgrid", "mailgun", "ses", "postmark", "generic"])
def test_each_sample_is_told_apart(shape: str) -> None:
    (path,) = SAMPLES.glob(f"feedback_{shape}.*")
    assert detect_format(path) == shape


def test_sendgrid() -> None:
    rows, found = events_of(SAMPLES / "feedback_sendgrid.json")
    assert rows == [
        ("nina.patel@fabrikam.test", "delivered", None),
        ("nina.patel@fabrikam.test", "opened", None),
        ("nina.patel@fabrikam.test", "clicked", None),
        ("natalie.roberts@riverbend-foods.test", "delivered", None),
        ("natalie.roberts@riverbend-foods.test", "opened", None),
        ("sofia.navarro@ironclad-manufacturing.test", "bounced", "soft"),  # type blocked
    ]
    assert (found.tally.records, found.tally.ignored) == (7, 1)  # "processed"


def test_sendgrid_csv_and_its_hard_bounces(tmp_path: Path) -> None:
    path = tmp_path / "sendgrid.csv"
    path.write_text(
        "email,timestamp,event,type,status,sg_event_id\n"
        "ann@shop.test,1795000000,bounce,bounce,5.1.1,a\n"
        "bob@shop.test,1795000000,bounce,,4.2.2,b\n"
        "cat@shop.test,1795000000,spamreport,,,c\n"
        "dan@shop.test,1795000000,group_unsubscribe,,,d\n"
    )
    rows, found = events_of(path)
    assert found.format == "sendgrid"
    assert rows == [
        ("ann@shop.test", "bounced", "hard"),
        ("bob@shop.test", "bounced", "soft"),
        ("cat@shop.test", "complained", None),
        ("dan@shop.test", "unsubscribed", None),
    ]


def test_mailgun() -> None:
    rows, found = events_of(SAMPLES / "feedback_mailgun.json")
    assert rows == [
        ("j.morrison@fabrikam.test", "bounced", "hard"),  # failed, permanent
        ("tariq.rahman@meridian-capital.test", "bounced", "soft"),  # failed, temporary
        ("tariq.rahman@meridian-capital.test", "delivered", None),
        ("natalie.roberts@riverbend-foods.test", "opened", None),
    ]
    assert found.tally.ignored == 1  # accepted


def test_mailgun_webhook_payloads_one_a_line(tmp_path: Path) -> None:
    path = tmp_path / "hooks.jsonl"
    payload = {
        "event-data": {
            "event": "complained",
            "recipient": "ann@shop.test",
            "timestamp": 1795000000.5,
        }
    }
    path.write_text(json.dumps({"signature": {}, **payload}) + "\n\n" + json.dumps(payload) + "\n")
    rows, _ = events_of(path, format="mailgun")
    assert rows == [("ann@shop.test", "complained", None)] * 2


def test_ses_through_sns() -> None:
    rows, _ = events_of(SAMPLES / "feedback_ses.json")
    assert rows == [
        ("amelia.bennett@meridian-capital.test", "bounced", "hard"),  # Permanent
        ("natalie.roberts@riverbend-foods.test", "bounced", "soft"),  # Transient
        ("tariq.rahman@meridian-capital.test", "delivered", None),  # one delivery, two recipients
        ("sofia.navarro@ironclad-manufacturing.test", "delivered", None),
        ("j.morrison@fabrikam.test", "delivered", None),
    ]


def test_ses_event_publishing_opens_and_clicks(tmp_path: Path) -> None:
    mail = {"destination": ["ann@shop.test"], "timestamp": "2026-11-20T10:00:00Z"}
    path = tmp_path / "ses.json"
    path.write_text(
        json.dumps(
            [
                {
                    "eventType": "Click",
                    "mail": mail,
                    "click": {"timestamp": "2026-11-20T11:00:00.000Z"},
                },
                {"eventType": "Open", "mail": mail, "open": {"timestamp": "2026-11-20T10:30:00Z"}},
                {"eventType": "Send", "mail": mail},
            ]
        )
    )
    rows, found = events_of(path)
    assert found.format == "ses"
    assert rows == [("ann@shop.test", "clicked", None), ("ann@shop.test", "opened", None)]
    assert found.tally.ignored == 1


def test_postmark() -> None:
    rows, found = events_of(SAMPLES / "feedback_postmark.json")
    assert rows == [
        ("patrick.reed@meridian-capital.test", "complained", None),
        ("olivia.brown@meridian-capital.test", "unsubscribed", None),
        ("olivia.brown@meridian-capital.test", "opened", None),
        ("patrick.reed@meridian-capital.test", "delivered", None),
        ("natalie.roberts@riverbend-foods.test", "bounced", "soft"),  # SoftBounce, 7 decimals
    ]
    assert not found.tally.bad


def test_postmark_bounces_api(tmp_path: Path) -> None:
    path = tmp_path / "bounces.json"
    bounces = [
        {"Type": "HardBounce", "Email": "ann@shop.test", "BouncedAt": "2026-11-20T10:00:00Z"},
        {"Type": "Transient", "Email": "bob@shop.test", "BouncedAt": "2026-11-20T10:00:00Z"},
    ]
    path.write_text(json.dumps({"TotalCount": 2, "Bounces": bounces}))
    rows, _ = events_of(path)
    assert rows == [("ann@shop.test", "bounced", "hard"), ("bob@shop.test", "bounced", "soft")]


def test_generic_csv_counts_its_bad_row() -> None:
    rows, found = events_of(SAMPLES / "feedback_generic.csv")
    assert rows == [
        ("carol.white@acme-corp.test", "delivered", None),
        ("carol.white@acme-corp.test", "replied", None),
        ("nina.patel@fabrikam.test", "opened", None),
        ("sofia.navarro@ironclad-manufacturing.test", "bounced", "soft"),
    ]
    assert dict(found.tally.bad) == {"no address": 1}
    assert found.tally.bad_line() == "1 bad row (1 no address)"


def test_generic_bad_rows_are_counted_by_reason(tmp_path: Path) -> None:
    path = tmp_path / "events.csv"
    path.write_text(
        "Email,Event,At,Bounce_Type\n"
        "Ann <ANN@shop.test>,Bounced,2026-11-20 10:00:00,hard\n"  # read as clean reads a cell
        "bob@shop.test,bounced,2026-11-20T10:00:00Z,\n"  # a bounce of no kind
        "cat@shop.test,forwarded,2026-11-20T10:00:00Z,\n"  # no such event
        "dan@shop.test,clicked,last tuesday,\n"
        "eve@shop.test,clicked,2026-11-20,,one field too many\n"
        "not an address,clicked,1795000000,\n"
    )
    rows, found = events_of(path)
    assert rows == [("ann@shop.test", "bounced", "hard")]
    assert dict(found.tally.bad) == {
        "bounce neither hard nor soft": 1,
        "unknown event": 1,
        "unreadable time": 1,
        "malformed row": 1,
        "no address": 1,
    }


def test_generic_parquet_without_bounce_type_is_hard_bounces(tmp_path: Path) -> None:
    path = tmp_path / "suppressions.parquet"
    table = pa.table(
        {
            "email": ["ann@shop.test"],
            "event": ["bounced"],
            "at": pa.array([1795000000_000], pa.timestamp("ms", tz="UTC")),
        }
    )
    pq.write_table(table, path)
    _, tables = read_events(path)
    (row,) = [r for t in tables for r in t.to_pylist()]
    assert row == {
        "address": "ann@shop.test",
        "event": "bounced",
        "at": 1795000000.0,
        "bounce": "hard",
    }


def test_an_arrow_table_in_the_generic_shape() -> None:
    _, tables = read_events(
        pa.table({"email": ["a@b.test"], "event": ["clicked"], "at": [1795000000]})
    )
    assert [r["event"] for t in tables for r in t.to_pylist()] == ["clicked"]


def test_a_file_that_is_no_export_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(FeedbackInputError, match="give --format") as raised:
        detect_format(SAMPLES / "world.json")
    assert isinstance(raised.value, InputError)
    broken = tmp_path / "broken.json"
    broken.write_text('{"email": "a@b.test", "event": "click", "timestamp": 1}\n{not json\n')
    with pytest.raises(FeedbackInputError, match="line 2"):
        events_of(broken, format="sendgrid")
