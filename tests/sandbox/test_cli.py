"""``listhygiene sandbox up / down / status / check`` from a shell, as a user runs them."""

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dns.resolver
import pytest

WORLD = {
    "domains": {
        "acme.test": {"mx": [{"preference": 10, "host": "mx.acme.test"}], "mailboxes": ["alice"]}
    },
    "hosts": {"mx.acme.test": {}},
}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A private state folder, so these tests never touch a user's running sandbox."""
    environ = {**os.environ, "LISTHYGIENE_SANDBOX_DIR": str(tmp_path / "state")}
    yield environ
    subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", "sandbox", "down"],
        env=environ,
        capture_output=True,
        check=False,
    )


@pytest.fixture
def world_file(tmp_path: Path) -> Path:
    path = tmp_path / "world.json"
    path.write_text(json.dumps(WORLD))
    return path


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def daemons(env: dict[str, str]) -> list[int]:
    """Sandbox daemons started with this test's state folder."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        marker = f"LISTHYGIENE_SANDBOX_DIR={env['LISTHYGIENE_SANDBOX_DIR']}".encode()
        if b"listhygiene.sandbox.daemon" in cmdline and marker in environ:
            found.append(int(proc.name))
    return found


def test_up_serves_the_world_and_down_leaves_nothing_running(
    env: dict[str, str], world_file: Path
) -> None:
    started = cli(env, "sandbox", "up", str(world_file), "--dns-port", "0", "--smtp-port", "0")
    assert started.returncode == 0, started.stderr
    exports = dict(
        line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines()
    )
    assert set(exports) == {
        "LISTHYGIENE_DNS_SERVER",
        "LISTHYGIENE_SMTP_PORT",
        "LISTHYGIENE_ALLOW_PRIVATE_MX",
        "LISTHYGIENE_VERDICTS",
    }
    assert exports["LISTHYGIENE_VERDICTS"] == "none"  # simulated verdicts stay out of stores
    host, port = exports["LISTHYGIENE_DNS_SERVER"].split(":")
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers, resolver.port, resolver.lifetime = [host], int(port), 2
    [mx] = resolver.resolve("acme.test", "MX")
    [a] = resolver.resolve(mx.exchange, "A")
    with socket.create_connection((a.address, int(exports["LISTHYGIENE_SMTP_PORT"])), 2) as s:
        assert s.recv(100).startswith(b"220 mx.acme.test")
    assert len(daemons(env)) == 1

    status = cli(env, "sandbox", "status", "--json")
    assert status.returncode == 0
    assert json.loads(status.stdout)["world"] == str(world_file)

    stopped = cli(env, "sandbox", "down")
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped" in stopped.stderr
    assert daemons(env) == []
    with pytest.raises(dns.resolver.LifetimeTimeout):
        resolver.resolve("acme.test", "MX")
    assert cli(env, "sandbox", "status").returncode == 1


def test_second_up_is_refused_clearly(env: dict[str, str], world_file: Path) -> None:
    assert (
        cli(env, "sandbox", "up", str(world_file), "--dns-port", "0", "--smtp-port", "0").returncode
        == 0
    )
    again = cli(env, "sandbox", "up", str(world_file), "--dns-port", "0", "--smtp-port", "0")
    assert again.returncode == 1
    assert "already running" in again.stderr
    assert "listhygiene sandbox down" in again.stderr
    assert len(daemons(env)) == 1


def test_down_with_nothing_running(env: dict[str, str]) -> None:
    result = cli(env, "sandbox", "down")
    assert result.returncode == 1
    assert "no sandbox is running" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("which", ["dns", "smtp"])
def test_port_in_use_is_a_clear_error_and_no_process_is_left(
    env: dict[str, str], world_file: Path, which: str
) -> None:
    kind = socket.SOCK_DGRAM if which == "dns" else socket.SOCK_STREAM
    with socket.socket(socket.AF_INET, kind) as taken:
        address = "127.0.0.1" if which == "dns" else "127.1.0.1"
        taken.bind((address, 0))
        if kind == socket.SOCK_STREAM:
            taken.listen()
        port = str(taken.getsockname()[1])
        args = (
            ["--dns-port", port, "--smtp-port", "0"]
            if which == "dns"
            else ["--dns-port", "0", "--smtp-port", port]
        )
        result = cli(env, "sandbox", "up", str(world_file), *args)
    assert result.returncode == 1
    assert f"port {port}" in result.stderr
    assert "already in use" in result.stderr
    assert "Traceback" not in result.stderr
    assert daemons(env) == []
    assert cli(env, "sandbox", "status").returncode == 1


def test_malformed_world_names_file_and_place(env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"domains": {"a.test": {"mx": [{"host": "m.test"}]}}}))
    for command in (["sandbox", "up", str(bad)], ["sandbox", "check", str(bad)]):
        result = cli(env, *command)
        assert result.returncode == 1
        assert f'{bad}: domains["a.test"].mx[0].preference: Field required' in result.stderr
    assert daemons(env) == []


def test_stale_state_of_a_dead_process_is_cleaned(env: dict[str, str], world_file: Path) -> None:
    state = Path(env["LISTHYGIENE_SANDBOX_DIR"])
    state.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (state / "state.json").write_text(
        json.dumps(
            {
                "pid": dead.pid,
                "world": "x",
                "dns_host": "127.0.0.1",
                "dns_port": 1,
                "smtp_port": 1,
                "hosts": {},
                "log": "x",
                "started_at": 0,
            }
        )
    )
    assert cli(env, "sandbox", "down").returncode == 1
    assert not (state / "state.json").exists()
    assert (
        cli(env, "sandbox", "up", str(world_file), "--dns-port", "0", "--smtp-port", "0").returncode
        == 0
    )


def test_every_command_has_an_example_in_its_help(env: dict[str, str]) -> None:
    from listhygiene.cli import main

    def walk(group, path):  # type: ignore[no-untyped-def]
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from walk(command, [*path, name])
            else:
                yield [*path, name]

    for path in walk(main, []):
        result = cli(env, *path, "--help")
        assert result.returncode == 0
        assert "Example:" in result.stdout, path
