"""World files: valid ones load; broken ones name the file, the place inside it and the fault."""

import json
from pathlib import Path

import pytest

from listhygiene.sandbox.world import World, WorldError, load_world


def write(tmp_path: Path, data: object, name: str = "world.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def error_of(path: Path) -> WorldError:
    with pytest.raises(WorldError) as caught:
        load_world(path)
    return caught.value


def test_names_are_normalised_to_lowercase_a_labels() -> None:
    world = World.from_dict(
        {
            "domains": {"Bücher.TEST.": {"mx": [{"preference": 5, "host": "MX.Bücher.test"}]}},
            "hosts": {"mx.bücher.test": {}},
        }
    )
    assert list(world.domains) == ["xn--bcher-kva.test"]
    assert world.domains["xn--bcher-kva.test"].mx[0].host == "mx.xn--bcher-kva.test"
    assert world.mail_hosts_of("xn--bcher-kva.test") == ["mx.xn--bcher-kva.test"]


def test_addresses_are_assigned_on_loopback_around_pinned_ones() -> None:
    world = World.from_dict(
        {"hosts": {"a.test": {}, "b.test": {"address": "127.1.0.1"}, "c.test": {}}}
    )
    addresses = world.host_addresses()
    assert addresses["b.test"] == "127.1.0.1"
    assert len(set(addresses.values())) == 3
    assert all(a.startswith("127.") for a in addresses.values())


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '{\n  "domains": {\n    "a.test": {,}\n  }\n}')
    error = error_of(path)
    assert str(path) in str(error)
    assert "line 3, column 16" in str(error)
    assert "invalid JSON" in str(error)


def test_missing_file_is_named(tmp_path: Path) -> None:
    error = error_of(tmp_path / "nope.json")
    assert str(tmp_path / "nope.json") in str(error)
    assert "no such file" in str(error)


def test_top_level_must_be_an_object(tmp_path: Path) -> None:
    assert "top level must be a JSON object" in str(error_of(write(tmp_path, [1, 2])))


@pytest.mark.parametrize(
    ("world", "where", "what"),
    [
        (
            {"domains": {"a.test": {"mx": [{"preference": 10}]}}},
            'domains["a.test"].mx[0].host',
            "Field required",
        ),
        (
            {"domains": {"a.test": {"mx": [{"preference": 70000, "host": "m.test"}]}}},
            'domains["a.test"].mx[0].preference',
            "less than or equal to 65535",
        ),
        (
            {"domains": {"a.test": {"dns": "flaky"}}},
            'domains["a.test"].dns',
            "'ok', 'nxdomain', 'servfail' or 'timeout'",
        ),
        (
            {"hosts": {"mx.a.test": {"behavior": "silent"}}},
            'hosts["mx.a.test"].behavior',
            "unknown field",
        ),
        (
            {"hosts": {"mx.a.test": {"address": "10.0.0.1"}}},
            'hosts["mx.a.test"].address',
            "not a loopback address",
        ),
        (
            {"hosts": {"mx.a.test": {"latency_ms": -5}}},
            'hosts["mx.a.test"].latency_ms',
            "greater than or equal to 0",
        ),
        (
            {"domains": {"a.test": {"null_mx": True, "mx": [{"preference": 1, "host": "m.test"}]}}},
            'domains["a.test"]',
            "null_mx and mx cannot both be given",
        ),
        (
            {"domains": {"a.test": {"aaaa": ["1.2.3.4"]}}},
            'domains["a.test"].aaaa',
            "not an IPv6 address",
        ),
        ({"domains": {"bad..name": {}}}, "domains", "not a valid DNS name"),
    ],
)
def test_schema_errors_name_the_path_inside_the_file(
    tmp_path: Path, world: dict, where: str, what: str
) -> None:
    path = write(tmp_path, world)
    message = str(error_of(path))
    assert message.startswith(f"{path}: {where}"), message
    assert what in message


def test_references_to_unknown_hosts_are_reported_together(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "domains": {"a.test": {"a": ["mx.nowhere.test"]}},
            "hosts": {"h1.test": {"address": "127.1.0.7"}, "h2.test": {"address": "127.1.0.7"}},
            "dnsbl": {"bl.test": ["ghost.test"]},
        },
    )
    message = str(error_of(path))
    assert 'domains["a.test"].a[0]' in message
    assert 'dnsbl["bl.test"][0]' in message
    assert "127.1.0.7 is also the address of" in message


def test_every_problem_is_reported_not_just_the_first(tmp_path: Path) -> None:
    path = write(tmp_path, {"hosts": {"a.test": {"latency_ms": -1, "smtputf8": "maybe"}}})
    error = error_of(path)
    assert {where for where, _ in error.problems} == {
        'hosts["a.test"].latency_ms',
        'hosts["a.test"].smtputf8',
    }
