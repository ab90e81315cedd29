"""A domain's IDNA work is done once per domain, and gives what email-validator gives per address.

docs/engine.md, "Syntax": addresses whose local part is a plain lower-case dot-atom but whose
domain needs email-validator (IDN, upper case, Punycode) are parsed with the domain's result
cached; the answer must equal email-validator's on the whole address.
"""

import pyarrow as pa
from email_validator import EmailNotValidError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from listhygiene.engine import syntax
from listhygiene.engine.syntax import Address, parse_address, parse_addresses, within_limits


def whole_address(value: str) -> Address | None:
    """What email-validator says of the whole address (the path without the per-domain cache)."""
    try:
        valid = syntax._validate(value.strip())
    except (EmailNotValidError, UnicodeError, ValueError):
        return None
    if not within_limits(valid.local_part, valid.ascii_domain):
        return None
    return Address(
        valid.normalized,
        valid.local_part,
        valid.ascii_domain,
        valid.domain,
        not valid.local_part.isascii(),
    )


_LOCAL = st.one_of(
    st.lists(
        st.text(alphabet="abcxyz0189_+-", min_size=1, max_size=20), min_size=1, max_size=4
    ).map(".".join),
    st.integers(60, 70).map(lambda n: "q" * n),
)
_LABEL = st.one_of(
    st.text(alphabet="abcABCüößé日本-0", min_size=1, max_size=20),
    st.sampled_from(["xn--bcher-kva", "münchen", "MÜNCHEN", "ex--ample", "-bad", "ⅷ", "ß"]),
    st.integers(50, 70).map(lambda n: "ü" * n),
)
_DOMAIN = st.lists(_LABEL, min_size=1, max_size=4).map(lambda labels: ".".join([*labels, "test"]))
_ADDRESS = st.builds(lambda local, domain: f"{local}@{domain}", _LOCAL, _DOMAIN)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ADDRESS)
def test_the_per_domain_path_equals_email_validator_on_the_whole_address(value: str) -> None:
    assert parse_address(value) == whole_address(value), value


def test_the_idna_work_runs_once_per_domain(monkeypatch: object) -> None:
    calls: list[str] = []
    real = syntax._validate

    def counted(text: str) -> object:
        calls.append(text)
        return real(text)

    syntax._domain.cache_clear()
    monkeypatch.setattr(syntax, "_validate", counted)  # type: ignore[attr-defined]
    values = [f"person{i}@bücher-{i % 3}.test" for i in range(300)]
    parsed = parse_addresses(pa.array(values)).to_pylist()
    assert all(row["valid"] for row in parsed)
    assert {row["domain"] for row in parsed} == {
        "xn--bcher-0-n2a.test",
        "xn--bcher-1-n2a.test",
        "xn--bcher-2-n2a.test",
    }
    assert len(calls) == 3  # one per domain, not one per address
