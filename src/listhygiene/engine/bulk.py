"""Verifying a whole column without SMTP, vectorised: a million addresses in seconds.

Without SMTP, a verdict depends on the address's syntax, its domain's DNS and lists, and whether
its local part is a role; so the work is done per *domain* (a few thousand DNS routes) and per
*column* (Arrow compute), never per address in Python. The decision table itself is not
re-implemented: the facts of each address are reduced to a handful of distinct combinations and
``statuses.decide`` is asked once per combination. The result equals ``Engine.verify(...,
check_smtp=False)`` field for field (but ``response_time``, here the domain lookup's time); a
test compares the two.
"""

from typing import TYPE_CHECKING

from listhygiene.engine.providers import provider_of
from listhygiene.engine.syntax import parse_columns
from listhygiene.results import arrow_schema, no_evidence
from listhygiene.statuses import DnsOutcome, Facts, MailboxOutcome, Reason, decide

if TYPE_CHECKING:
    import pyarrow as pa

    from listhygiene.engine.engine import Engine

__all__ = ["verify_column_without_smtp"]

#: The DNS outcomes in a fixed order: a combination of facts is coded as a small integer.
_OUTCOMES = tuple(DnsOutcome)
#: The domain-less row's reputation: the one a result without a domain reports.
_NO_REPUTATION = {"mx_ip": "", "is_listed": False, "blacklists": [], "checked": False}


async def verify_column_without_smtp(engine: "Engine", values: "pa.Array") -> "pa.Table":
    """Results for ``values`` (strings) with ``check_smtp`` off, aligned with them.

    The table has :func:`listhygiene.results.arrow_schema` (internal columns included).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    parsed = parse_columns(values)
    valid = parsed["valid"]
    local = parsed["local_part"]
    n = len(values)

    # per domain: DNS route, reputation, lists; one row more, last, for the addresses without
    # a domain (invalid ones), holding what their results say, so that one take per column
    # gives every address its value
    encoded = pc.dictionary_encode(parsed["domain"])
    names = encoded.dictionary.to_pylist()
    facts = await engine.domain_facts(names)
    lists = engine.lists
    routes = [facts[d][0] for d in names]
    for domain, route in zip(names, routes, strict=True):  # all listed ones first: one answer
        engine.learn_disposable_hosts(domain, route)  # for every domain, whatever the order
    per_domain = {
        "dns": pa.array(
            [route.outcome.value for route in routes] + [DnsOutcome.NOT_CHECKED.value],
            pa.string(),
        ),
        "mx_records": pa.array(
            [list(route.mx_records) for route in routes] + [[]], pa.list_(pa.string())
        ),
        "domain_reputation": pa.array(
            [facts[d][1].model_dump(mode="json") for d in names] + [_NO_REPUTATION],
            arrow_schema().field("domain_reputation").type,
        ),
        "is_disposable": pa.array(
            [engine.is_disposable(d, r) for d, r in zip(names, routes, strict=True)] + [False],
            pa.bool_(),
        ),
        "is_free": pa.array([lists.is_free(d) for d in names] + [False], pa.bool_()),
        "suggested": pa.array([engine.suggester.domain(d) for d in names] + [None], pa.string()),
        "mx_provider": pa.array(
            [
                provider_of([mx.name for mx in route.exchangers], d)
                for d, route in zip(names, routes, strict=True)
            ]
            + [None],
            pa.string(),
        ),
        "response_time": pa.array([facts[d][2] for d in names] + [0], pa.int64()),
    }
    index = pc.fill_null(encoded.indices, len(names))  # the last row for invalid addresses
    spread = {name: column.take(index) for name, column in per_domain.items()}

    # a role's local part, or its part before a "+" tag
    roles = pa.array(sorted(lists.roles), pa.string())
    lowered = pc.utf8_lower(local)
    is_role = pc.fill_null(pc.is_in(lowered, value_set=roles), False)
    tagged = pc.fill_null(pc.match_substring(lowered, "+"), False)
    if pc.any(tagged).as_py():
        base = pc.replace_substring_regex(lowered.filter(tagged), r"\+.*$", "")
        is_role = pc.or_(
            is_role,
            pc.replace_with_mask(pa.repeat(False, n), tagged, pc.is_in(base, value_set=roles)),
        )

    # one decision per distinct combination of facts, coded as (outcome, disposable, role)
    # over the domain's row (whose validity it carries: the last row is the invalid one)
    outcome_of = {outcome.value: code for code, outcome in enumerate(_OUTCOMES)}
    row_code = np.array(
        [outcome_of[d] for d in per_domain["dns"].to_pylist()], dtype=np.int64
    ) * 2 + per_domain["is_disposable"].to_numpy(zero_copy_only=False)
    row_code = row_code * 2 + (np.arange(len(row_code)) < len(names))
    code = row_code[index.to_numpy()] * 2 + is_role.to_numpy(zero_copy_only=False)
    present = np.unique(code)
    verdicts = []
    for key in present.tolist():
        rest, role = divmod(key, 2)
        rest, syntax_ok = divmod(rest, 2)
        outcome, disp = divmod(rest, 2)
        verdict_facts = Facts(
            syntax_valid=bool(syntax_ok),
            dns=_OUTCOMES[outcome],
            undetermined_reason=Reason.DNS_ERROR
            if _OUTCOMES[outcome] is DnsOutcome.ERROR
            else None,
            is_disposable=bool(disp),
            is_role=bool(role),
        )
        verdicts.append((decide(verdict_facts), verdict_facts.undetermined_reason))
    which = pa.array(np.searchsorted(present, code))

    def pick(values: list[object], type_: "pa.DataType") -> "pa.Array":
        return pa.array(values, type_).take(which)

    columns = {
        "email": pc.fill_null(pc.if_else(valid, parsed["email"], parsed["text"]), ""),
        "status": pick([v.status.value for v, _ in verdicts], pa.string()),
        "score": pick([v.score for v, _ in verdicts], pa.float64()),
        "is_deliverable": pick([v.is_deliverable for v, _ in verdicts], pa.bool_()),
        "is_disposable": spread["is_disposable"],
        "is_catchall": pa.repeat(False, n),
        "is_role": is_role,
        "is_free": spread["is_free"],
        "domain": pc.fill_null(parsed["domain_unicode"], ""),
        "mx_records": spread["mx_records"],
        "domain_reputation": spread["domain_reputation"],
        "smtp_check": pa.repeat(False, n),
        "reason": pick([v.reason.value if v.reason else None for v, _ in verdicts], pa.string()),
        "response_time": spread["response_time"],
        "credits_used": pick([v.credits_used for v, _ in verdicts], pa.int64()),
        "dns": spread["dns"],
        "mailbox": pa.repeat(MailboxOutcome.NOT_CHECKED.value, n),
        "undetermined_reason": pick([r.value if r else None for _, r in verdicts], pa.string()),
        # the address likely meant: its local part at the suggested domain (engine/suggest.py)
        "suggestion": pc.binary_join_element_wise(local, spread["suggested"], "@"),
        "mx_provider": spread["mx_provider"],
        **no_evidence(n),  # feedback is the pipeline's to apply (verdicts/evidence.py)
    }
    schema = arrow_schema(internal=True)
    return pa.table([pc.cast(columns[f.name], f.type) for f in schema], schema=schema)
