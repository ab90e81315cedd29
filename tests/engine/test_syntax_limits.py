"""Length limits of RFC 5321 section 4.5.3.1, one rule for the scalar and the vectorised path.

Local part at most 64 octets, domain at most 253 (255 in the RFC, less the DNS root's two),
the whole address at most 254 (a path of 256 with its angle brackets).
"""

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from listhygiene.engine.syntax import parse_address, parse_addresses

OVER_64 = "pamela.russo." + "x" * 57 + "@example.com"  # a 70-octet local part, from issue 14


def both(value: str) -> tuple[bool, bool]:
    """Whether the scalar and the vectorised path accept ``value``."""
    vector = parse_addresses(pa.array([value])).column("valid")[0].as_py()
    return parse_address(value) is not None, bool(vector)


@pytest.mark.parametrize(
    "value",
    [
        OVER_64,
        "a" * 65 + "@example.com",
        "first.last." + "y" * 54 + "@example.com",  # 65 octets, dots included
        "é" * 33 + "@example.com",  # 33 characters but 66 octets in UTF-8
        '"' + "z " * 31 + 'z"@example.com',  # quoted (a space needs it): 65 octets as sent
        "a" * 64 + "@" + ".".join(["b" * 63] * 3) + ".test",  # 64 + 1 + 196 = 261 octets
    ],
    ids=["issue-14", "65-plain", "65-dotted", "66-octets-utf8", "quoted-65", "path-over-254"],
)
def test_addresses_over_the_limits_are_invalid_on_both_paths(value: str) -> None:
    assert both(value) == (False, False)


@pytest.mark.parametrize(
    "value",
    [
        "a" * 64 + "@example.com",
        "pamela.russo." + "x" * 51 + "@example.com",  # exactly 64
        "é" * 32 + "@example.com",  # 64 octets
        "a" * 64 + "@" + "b" * 63 + "." + "c" * 63 + "." + "d" * 56 + ".test",  # 64 + 1 + 189
    ],
    ids=["64-plain", "64-dotted", "64-octets-utf8", "path-254"],
)
def test_addresses_at_the_limits_are_valid_on_both_paths(value: str) -> None:
    assert both(value) == (True, True)


# -- property: the two paths agree on every address, and what they accept is within limits -------

_ATOM = st.text(alphabet="abcxyzABC0189!#$%&'*+/=?^_`{|}~-éßü", min_size=1, max_size=40)
_LOCAL = st.one_of(
    st.lists(_ATOM, min_size=1, max_size=5).map(".".join),
    st.integers(55, 75).map(lambda n: "x" * n),
    st.tuples(st.integers(1, 30), st.integers(30, 50)).map(lambda t: "a" * t[0] + "." + "b" * t[1]),
    st.text(alphabet='ab é"\\', min_size=0, max_size=70).map(lambda s: f'"{s}"'),
)
_LABEL = st.text(alphabet="abcxyz09-", min_size=1, max_size=63)
_DOMAIN = st.one_of(
    st.lists(_LABEL, min_size=1, max_size=5).map(lambda labels: ".".join([*labels, "test"])),
    st.sampled_from(["example.com", "bücher.test", "xn--bcher-kva.test", "a.b", "x.localhost"]),
    st.integers(1, 4).map(lambda n: ".".join(["d" * 63] * n) + ".test"),
)
_ADDRESS = st.builds(lambda local, domain: f"{local}@{domain}", _LOCAL, _DOMAIN)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_ADDRESS, min_size=1, max_size=30))
def test_scalar_and_vectorised_paths_agree(values: list[str]) -> None:
    table = parse_addresses(pa.array(values)).to_pylist()
    for value, row in zip(values, table, strict=True):
        address = parse_address(value)
        assert row["valid"] == (address is not None), value
        if address is None:
            continue
        assert (row["email"], row["local_part"], row["domain"]) == (
            address.email,
            address.local_part,
            address.domain,
        ), value
        assert len(address.local_part.encode()) <= 64, value
        assert len(address.domain) <= 253, value
        assert len(address.smtp_address.encode()) <= 254, value
