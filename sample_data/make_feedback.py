"""Build the feedback sample files of ``sample_data/``: what five email services reported of mail
sent to addresses of ``crm_export.csv`` (docs/feedback.md has the worked example).

    .venv/bin/python sample_data/make_feedback.py

writes, next to this file, one export per shape that ``listhygiene feedback add`` reads, dated
in the days before ``BASE`` (2026-11-27): ``feedback_sendgrid.json`` (Event Webhook JSON),
``feedback_mailgun.json`` (Events API page), ``feedback_ses.json`` (SNS notifications, one a
line), ``feedback_postmark.json`` (webhook payloads) and ``feedback_generic.csv`` (the generic
shape, with one bad row). ``write(folder, base=...)`` writes the same events dated before
another moment (the tests date them before the run that applies them).

What they teach the sample world (``world.json``): ``fabrikam.test`` is catch-all; its
``nina.patel`` clicked (SendGrid) and its ``j.morrison``, which is no mailbox, bounced hard
(Mailgun). The constants below name every address and what its events are.
"""

import csv
import json
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASE = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)

#: The catch-all domain's engaged and hard-bounced addresses (docs/feedback.md).
CATCHALL_ENGAGED = "nina.patel@fabrikam.test"
CATCHALL_BOUNCED = "j.morrison@fabrikam.test"
#: A valid address of a domain that is not catch-all, hard-bounced (SES): invalid when the bounce
#: is newer than its verdict.
VALID_BOUNCED = "amelia.bennett@meridian-capital.test"
#: Valid addresses with events that are no evidence: opens, deliveries, soft bounces.
NO_EFFECT = (
    "natalie.roberts@riverbend-foods.test",  # delivered and opened (SendGrid)
    "sofia.navarro@ironclad-manufacturing.test",  # soft bounce, blocked (SendGrid)
    "tariq.rahman@meridian-capital.test",  # soft bounce (Mailgun), delivered (SES)
)
COMPLAINED = "patrick.reed@meridian-capital.test"  # Postmark
UNSUBSCRIBED = "olivia.brown@meridian-capital.test"  # Postmark
REPLIED = "carol.white@acme-corp.test"  # generic: engaged, already valid


def _id(*parts: object) -> int:
    """A stable id for a sample event (``hash()`` of a string differs between processes)."""
    return zlib.crc32(repr(parts).encode())


def write(folder: Path, *, base: datetime = BASE) -> dict[str, Path]:
    """Write the five files into ``folder``, dated in the three days before ``base``."""

    def ago(hours: float) -> datetime:
        return base - timedelta(hours=hours)

    def unix(hours: float) -> float:
        return round(ago(hours).timestamp(), 3)

    def iso(hours: float) -> str:
        return ago(hours).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "sendgrid": folder / "feedback_sendgrid.json",
        "mailgun": folder / "feedback_mailgun.json",
        "ses": folder / "feedback_ses.json",
        "postmark": folder / "feedback_postmark.json",
        "generic": folder / "feedback_generic.csv",
    }
    natalie, sofia, tariq = NO_EFFECT

    def sendgrid(email: str, event: str, hours: float, **extra: object) -> dict[str, object]:
        sg = f"sg{_id(email, event, hours)}"
        return {
            "email": email,
            "timestamp": int(unix(hours)),
            "event": event,
            "sg_event_id": sg,
            "sg_message_id": f"{sg}.filter0001",
            **extra,
        }

    sendgrid_events = [
        sendgrid(CATCHALL_ENGAGED, "processed", 30),
        sendgrid(CATCHALL_ENGAGED, "delivered", 30, response="250 2.0.0 OK"),
        sendgrid(CATCHALL_ENGAGED, "open", 29, useragent="Mozilla/5.0"),
        sendgrid(CATCHALL_ENGAGED, "click", 28, url="https://example.test/offer"),
        sendgrid(natalie, "delivered", 30, response="250 2.0.0 OK"),
        sendgrid(natalie, "open", 27, useragent="Mozilla/5.0"),
        sendgrid(
            sofia, "bounce", 30, type="blocked", status="4.7.1", reason="451 4.7.1 Try again later"
        ),
    ]
    files["sendgrid"].write_text(json.dumps(sendgrid_events, indent=2) + "\n", encoding="utf-8")

    def mailgun(email: str, event: str, hours: float, **extra: object) -> dict[str, object]:
        return {
            "id": f"mg-{_id(email, event)}",
            "event": event,
            "recipient": email,
            "timestamp": unix(hours),
            **extra,
        }

    mailgun_page = {
        "items": [
            mailgun(CATCHALL_BOUNCED, "accepted", 40),
            mailgun(
                CATCHALL_BOUNCED,
                "failed",
                40,
                severity="permanent",
                reason="bounce",
                **{"delivery-status": {"code": 550, "message": "5.1.1 No such user"}},
            ),
            mailgun(
                tariq,
                "failed",
                39,
                severity="temporary",
                reason="generic",
                **{"delivery-status": {"code": 452, "message": "4.2.2 Mailbox full"}},
            ),
            mailgun(tariq, "delivered", 20),
            mailgun(natalie, "opened", 19),
        ],
        "paging": {"next": "https://api.mailgun.net/v3/example.test/events/next"},
    }
    files["mailgun"].write_text(json.dumps(mailgun_page, indent=2) + "\n", encoding="utf-8")

    def sns(message: dict[str, object], hours: float) -> dict[str, object]:
        return {
            "Type": "Notification",
            "MessageId": f"sns-{_id(message)}",
            "TopicArn": "arn:aws:sns:eu-west-1:123456789012:ses-feedback",
            "Message": json.dumps(message),
            "Timestamp": iso(hours),
        }

    mail = {"timestamp": iso(50), "source": "news@example.test", "messageId": "0102-ses"}
    ses_events = [
        sns(
            {
                "notificationType": "Bounce",
                "mail": mail,
                "bounce": {
                    "bounceType": "Permanent",
                    "bounceSubType": "General",
                    "timestamp": iso(2),
                    "bouncedRecipients": [
                        {
                            "emailAddress": VALID_BOUNCED,
                            "status": "5.1.1",
                            "diagnosticCode": "smtp; 550 5.1.1 user unknown",
                        }
                    ],
                },
            },
            2,
        ),
        sns(
            {
                "notificationType": "Bounce",
                "mail": mail,
                "bounce": {
                    "bounceType": "Transient",
                    "bounceSubType": "MailboxFull",
                    "timestamp": iso(48),
                    "bouncedRecipients": [{"emailAddress": natalie}],
                },
            },
            48,
        ),
        sns(
            {
                "notificationType": "Delivery",
                "mail": mail,
                "delivery": {"timestamp": iso(49), "recipients": [tariq, sofia]},
            },
            49,
        ),
        sns(
            {
                "notificationType": "Delivery",
                "mail": mail,
                "delivery": {"timestamp": iso(49), "recipients": [CATCHALL_BOUNCED]},
            },
            49,
        ),
    ]
    files["ses"].write_text("".join(json.dumps(e) + "\n" for e in ses_events), encoding="utf-8")

    postmark = [
        {
            "RecordType": "SpamComplaint",
            "Type": "SpamComplaint",
            "TypeCode": 512,
            "Email": COMPLAINED,
            "BouncedAt": iso(10),
            "MessageStream": "broadcast",
        },
        {
            "RecordType": "SubscriptionChange",
            "Recipient": UNSUBSCRIBED,
            "ChangedAt": iso(9),
            "SuppressSending": True,
            "SuppressionReason": "ManualSuppression",
        },
        {"RecordType": "Open", "Recipient": UNSUBSCRIBED, "ReceivedAt": iso(11), "FirstOpen": True},
        {"RecordType": "Delivery", "Recipient": COMPLAINED, "DeliveredAt": iso(12)},
        {
            "RecordType": "Bounce",
            "Type": "SoftBounce",
            "TypeCode": 4096,
            "Email": natalie,
            "BouncedAt": ago(13).strftime("%Y-%m-%dT%H:%M:%S.%f") + "3Z",
        },
    ]
    files["postmark"].write_text(json.dumps(postmark, indent=2) + "\n", encoding="utf-8")

    with files["generic"].open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["email", "event", "at", "bounce_type"])
        writer.writerow([REPLIED, "delivered", iso(6), ""])
        writer.writerow([REPLIED, "replied", iso(5), ""])
        writer.writerow([CATCHALL_ENGAGED, "opened", iso(4), ""])
        writer.writerow([sofia, "bounced", iso(3), "soft"])
        writer.writerow(["", "clicked", iso(3), ""])  # a bad row: no address
    return files


def main() -> int:
    for name, path in write(HERE).items():
        print(f"{name}: {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
