"""``listhygiene explain ADDRESS`` (issue 19, item 6; docs/engine.md, "Explaining one address"):
the DNS answers, each SMTP command and reply with its round trip, and the deciding row."""

import asyncio
import json
import os
import re
import subprocess
import sys

from listhygiene.engine import Engine
from listhygiene.engine.explain import explain
from listhygiene.engine.trace import Trace, active, recording
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import Status

WORLD = {
    "domains": {
        "acme.test": {
            "mx": [{"preference": 10, "host": "mx.acme.test"}],
            "mailboxes": ["alice"],
            "full": ["dana"],
        },
        "nomail.test": {"null_mx": True},
    },
    "hosts": {"mx.acme.test": {}},
}


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


def _cli(sandbox: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **sandbox.engine_environment(), "LISTHYGIENE_HELO": "verifier.test"}
    return subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", "explain", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_the_whole_conversation_is_printed(sandbox: Sandbox) -> None:
    done = _cli(sandbox, "alice@acme.test")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "DNS" in out
    assert "MX acme.test: 10 mx.acme.test." in out
    assert "A mx.acme.test: " in out
    assert "TCP" in out
    assert "connected" in out
    assert ">> " in out
    assert "EHLO verifier.test" in out
    assert "MAIL FROM:<verify@verifier.test>" in out
    assert "RCPT TO:<alice@acme.test>" in out
    assert "(catch-all probe: a random local part)" in out
    assert "<< " in out
    assert "250 2.1.5" in out
    assert " ms)" in out  # each round trip has its time
    assert "\ndecision: row 9 of the decision table (accepted) -> valid\n" in out
    assert "-> valid" in out
    # the last line: what the sessions cost the host (one host, friendly: no limit met)
    last = out.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(
        r"politeness: \d+ sessions?, at most 1 at once to one host, 0 limits met, 0 bans", last
    ), last


def test_json_names_the_deciding_row(sandbox: Sandbox) -> None:
    done = _cli(sandbox, "dana@acme.test", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["decision"] == {
        "row": 7,
        "condition": "mailbox full",
        "status": "risky",
        "reason": "mailbox_full",
    }
    sent = [e["text"] for e in data["events"] if e["kind"] == "send"]
    assert "RCPT TO:<dana@acme.test>" in sent
    replies = [e for e in data["events"] if e["kind"] == "reply"]
    assert any(e["text"].startswith("552 5.2.2") for e in replies)
    assert all(e["took_ms"] is not None for e in replies)
    kinds = [e["kind"] for e in data["events"]]
    assert kinds.index("dns") < kinds.index("connect") < kinds.index("send")
    polite = data["politeness"]
    assert set(polite) == {"sessions", "max_sessions_one_host", "limits_met", "bans"}
    assert polite["sessions"] >= 1
    assert polite["max_sessions_one_host"] == 1
    assert polite["limits_met"] == polite["bans"] == 0


def test_a_domain_without_mail_is_decided_by_dns_alone(sandbox: Sandbox) -> None:
    explanation = asyncio.run(explain("x@nomail.test", sandbox.engine_settings(helo="v.test")))
    assert explanation.row == 2
    assert explanation.result.status is Status.INVALID
    assert [e.kind for e in explanation.trace.events] == ["dns"]
    assert explanation.trace.events[0].text.startswith("MX nomail.test: 0 .")
    assert explanation.as_dict()["politeness"] == {
        "sessions": 0,
        "max_sessions_one_host": 0,
        "limits_met": 0,
        "bans": 0,
    }
    assert explanation.lines()[-1] == (
        "politeness: 0 sessions, at most 0 at once to one host, 0 limits met, 0 bans"
    )


def test_bad_syntax_is_row_1_without_any_conversation(sandbox: Sandbox) -> None:
    done = _cli(sandbox, "not an address")
    assert done.returncode == 0
    assert "decision: row 1 " in done.stdout
    assert "-> invalid, reason invalid_syntax" in done.stdout


def test_nothing_is_recorded_outside_a_recording(sandbox: Sandbox) -> None:
    trace = Trace()
    engine = Engine(sandbox.engine_settings(helo="v.test"))

    async def both() -> None:
        with recording(trace):
            traced = asyncio.ensure_future(engine.verify("alice@acme.test"))
        assert active() is None
        await asyncio.gather(
            traced, Engine(sandbox.engine_settings(helo="v.test")).verify("dana@acme.test")
        )

    asyncio.run(both())
    texts = [e.text for e in trace.events]
    assert any("alice@acme.test" in t for t in texts)
    assert not any("dana@acme.test" in t for t in texts)  # the other engine's run is not traced
