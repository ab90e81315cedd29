"""The sandbox's STARTTLS certificate leaves no ``listhygiene-sandbox-tls-*`` folder behind
(issue 14, item 7), whether the sandbox runs in-process or as the ``sandbox up`` daemon."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PORTS = ("--dns-port", "0", "--smtp-port", "0")
WORLD = {
    "domains": {
        "acme.test": {"mx": [{"preference": 10, "host": "mx.acme.test"}], "mailboxes": ["alice"]}
    },
    "hosts": {"mx.acme.test": {"starttls": True}},
}


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("listhygiene-sandbox-tls-*"))


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A private temporary folder (and sandbox state folder) for the child processes."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return {**os.environ, "TMPDIR": str(tmp), "LISTHYGIENE_SANDBOX_DIR": str(tmp_path / "state")}


@pytest.mark.timeout(90)
def test_an_in_process_sandbox_with_starttls_leaves_no_certificate_folder(
    env: dict[str, str],
) -> None:
    script = textwrap.dedent(
        f"""
        import smtplib, ssl
        from listhygiene.sandbox import Sandbox
        with Sandbox({WORLD!r}) as sandbox:
            address = sandbox.endpoints.hosts["mx.acme.test"]
            with smtplib.SMTP(address, sandbox.smtp_port, timeout=10) as smtp:
                smtp.ehlo("client.test")
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                smtp.starttls(context=context)
                print(smtp.ehlo("client.test")[0])
        """
    )
    done = run(env, "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["250"]  # STARTTLS worked, so a certificate was made
    assert leftovers(Path(env["TMPDIR"])) == []


@pytest.mark.timeout(90)
def test_sandbox_up_and_down_leave_no_certificate_folder(
    env: dict[str, str], tmp_path: Path
) -> None:
    world = tmp_path / "world.json"
    world.write_text(json.dumps(WORLD))
    try:
        up = run(env, "-m", "listhygiene.cli", "sandbox", "up", str(world), *PORTS)
        assert up.returncode == 0, up.stderr
    finally:
        down = run(env, "-m", "listhygiene.cli", "sandbox", "down")
    assert down.returncode == 0, down.stderr
    assert leftovers(Path(env["TMPDIR"])) == []
