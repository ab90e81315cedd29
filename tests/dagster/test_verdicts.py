"""The verdict store through Dagster: the asset factory takes a ``VerdictStoreResource``; a second
materialisation reuses the first's verdicts (no SMTP session for them) and says so in the
verification's metadata, with the changed rows and the path of ``changed.parquet``.

The test session sets ``LISTHYGIENE_VERDICTS=none`` (tests/conftest.py): the store is named here.
"""

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dagster as dg
from listhygiene.sandbox import Sandbox
from listhygiene_dagster import (
    VerdictStoreResource,
    VerificationBackendResource,
    build_email_hygiene_assets,
)
from tests.conftest import write_contacts
from tests.dagster.test_dagster_assets import engine_options, metadata_of, resources

CSV = """id,name,Email
1,Alice,alice.johnson@acme-corp.test
2,Alice again, ALICE.Johnson@Acme-Corp.test
3,Bob,bob.smith@acme-corp.test
4,Nobody,nobody.here@acme-corp.test
5,Info,info@contoso.test
6,Blank,
"""
DISTINCT = 4


# Three materialisations in a row: past the default 120 s on a loaded 2-core machine.
@pytest.mark.timeout(600)
def test_a_second_materialisation_reuses_verdicts_and_shows_them(
    mail_sandbox: Sandbox, tmp_path: Path
) -> None:
    contacts = write_contacts(tmp_path, CSV)
    assets = build_email_hygiene_assets(
        name="crm", output_dir=str(tmp_path / "runs"), verdicts_resource_key="verdict_store"
    )
    store = VerdictStoreResource(url=f"sqlite:///{tmp_path / 'verdicts.sqlite'}", max_age="30d")

    def run(check_smtp: bool = True, **config: Any) -> dict[str, Any]:
        backend = VerificationBackendResource(
            kind="local", check_smtp=check_smtp, **engine_options(mail_sandbox)
        )
        result = dg.materialize(
            assets,
            resources={
                **resources(tmp_path, str(contacts), backend),
                "verdict_store": store,
            },
            run_config={"ops": {"crm__verification": {"config": config}}} if config else None,
        )
        assert result.success
        return metadata_of(result, ["crm", "verification"])

    def counts(meta: dict[str, Any]) -> tuple[int, int, int]:
        return tuple(meta[f"verdicts {n}"].value for n in ("reused", "verified", "changed"))

    # a night without SMTP, then one with it: a DNS-only verdict never stands in for SMTP,
    # and the mailbox SMTP finds gone is a change
    assert counts(run(check_smtp=False)) == (0, DISTINCT, 0)
    with_smtp = run()
    assert counts(with_smtp) == (0, DISTINCT, 1)
    assert with_smtp["changed rows"].value == 1
    changed = pd.read_parquet(with_smtp["changed"].value)
    assert list(changed["Email"]) == ["nobody.here@acme-corp.test"]
    assert list(changed["previous_status"]) == ["valid"]
    assert "| valid->invalid | 1 |" in with_smtp["transitions"].value
    assert with_smtp["verdict store"].value.startswith("sqlite:///")

    # the next night: everything reused, no SMTP session to the reused addresses' host
    sessions = mail_sandbox.stats("mx.acme-corp.test").connections
    again = run()
    assert counts(again) == (DISTINCT, 0, 0)
    assert again["changed rows"].value == 0
    assert Path(again["changed"].value).is_file()
    assert mail_sandbox.stats("mx.acme-corp.test").connections == sessions

    # one run verifying everything again, from the asset's run config
    assert counts(run(fresh=True)) == (0, DISTINCT, 0)


def test_the_resource_describes_its_store_without_the_password() -> None:
    resource = VerdictStoreResource(url="postgresql://lh:secret@db:5432/verdicts", max_age="14d")
    assert resource.describe() == "postgresql://lh:***@db:5432/verdicts"
    assert resource.clean_options() == {
        "verdicts": "postgresql://lh:secret@db:5432/verdicts",
        "max_age": "14d",
        "fresh": False,
    }
    assert resource.clean_options(fresh=True)["fresh"] is True
    assert VerdictStoreResource(url="none").describe() == "no verdict store"
