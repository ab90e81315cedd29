"""The chunked Dagster job: split by domain, one op per chunk, merged into one run's folder."""

from pathlib import Path

import pandas as pd
import pytest

import listhygiene
from listhygiene.pipeline.quality import STATUSES
from listhygiene.sandbox import Sandbox
from listhygiene_dagster import VerificationBackendResource
from listhygiene_dagster.chunks import build_chunked_clean_job

REPO = Path(__file__).resolve().parents[2]
CRM = REPO / "sample_data" / "crm_export.csv"


# The sample's 1,000 rows cleaned twice (chunks, then one run) and checked twice: past the
# default 120 s on a loaded 2-core machine.
@pytest.mark.timeout(600)
def test_the_chunked_job_merges_to_what_one_run_gives(
    mail_sandbox: Sandbox, tmp_path: Path
) -> None:
    settings = mail_sandbox.engine_settings(helo="verifier.test", smtp_timeout=2, retry_delays=())
    backend = VerificationBackendResource(
        kind="local",
        dns_server=settings.dns_server,
        smtp_port=settings.smtp_port,
        allow_private_mx=True,
        helo="verifier.test",
        smtp_timeout=2,
        retry_delays=[],
    )
    job = build_chunked_clean_job(
        name="crm_chunks", source=str(CRM), output_dir=str(tmp_path / "runs"), chunks=3
    )
    result = job.execute_in_process(resources={"verification_backend": backend})
    assert result.success
    merged = result.output_for_node("crm_chunks_merge")
    run = tmp_path / "runs" / "crm_chunks" / result.run_id
    assert sorted(p.name for p in run.glob("chunk-*")) == ["chunk-0", "chunk-1", "chunk-2"]
    assert merged["input"]["chunks"] == 3
    assert merged["quality"]["passed"] is True
    assert (run / "merged" / "report.html").is_file()

    single = listhygiene.clean(CRM, tmp_path / "single", settings=settings)
    assert merged["rows"] == single.summary["rows"]
    for status in STATUSES:
        mine = pd.read_parquet(run / "merged" / f"{status}.parquet")
        theirs = single.frame(status)
        assert list(mine.columns) == list(theirs.columns)
        assert mine["email"].tolist() == theirs["email"].tolist(), status


def test_with_shared_limits_the_split_cuts_a_giant_domain(tmp_path: Path) -> None:
    """The backend resource's ``shared_limits`` reaches the split: the domain holding most rows
    goes to both chunks, and the merge still holds every row once."""
    import json

    from listhygiene.pipeline.chunks import SPLIT_MANIFEST

    source = tmp_path / "list.csv"
    rows = [f"user{i}@giant.test" for i in range(40)] + [f"a{i}@small{i}.test" for i in range(8)]
    source.write_text("email\n" + "\n".join(rows) + "\n")
    backend = VerificationBackendResource(
        kind="local", shared_limits="postgresql://postgres@127.0.0.1:5432/test", check_smtp=False
    )
    job = build_chunked_clean_job(
        name="fleet_chunks", source=str(source), output_dir=str(tmp_path / "runs"), chunks=2
    )
    result = job.execute_in_process(resources={"verification_backend": backend})
    assert result.success
    run = tmp_path / "runs" / "fleet_chunks" / result.run_id
    split = json.loads((run / "chunks" / SPLIT_MANIFEST).read_text())
    assert split["split_domains"] == {"giant.test": 2}
    assert result.output_for_node("fleet_chunks_merge")["rows"]["total"] == len(rows)


def test_the_resource_gives_the_engine_its_fleet_settings(tmp_path: Path) -> None:
    limits = tmp_path / "limits.toml"
    limits.write_text("[google]\nconcurrency = 1\n")
    store = "postgresql://postgres@127.0.0.1:5432/test"
    settings = VerificationBackendResource(
        kind="local",
        socks_proxy="google=socks5://127.0.0.1:1080",
        provider_limits=str(limits),
        shared_limits=store,
    ).engine_settings()
    assert settings.proxy_for("google") == "socks5://127.0.0.1:1080"
    assert settings.proxy_for(None) is None
    assert settings.provider_budgets()["google"][0] == 1
    assert settings.shared_limits == store


def test_the_resource_takes_any_engine_setting_in_engine(tmp_path: Path) -> None:
    """``engine`` carries what the resource has no field for, from run config too; a name
    that is no engine setting is refused with it."""
    import dagster as dg
    from listhygiene.errors import ConfigurationError

    @dg.op(required_resource_keys={"verification_backend"})
    def settings_of(context: dg.OpExecutionContext) -> int:
        return int(context.resources.verification_backend.engine_settings().rcpt_per_session)

    @dg.job(resource_defs={"verification_backend": VerificationBackendResource(kind="local")})
    def job() -> None:
        settings_of()

    config = {
        "resources": {"verification_backend": {"config": {"engine": {"rcpt_per_session": 3}}}}
    }
    assert job.execute_in_process(run_config=config).output_for_node("settings_of") == 3
    with pytest.raises(ConfigurationError, match="rcpt_per_sessoin"):
        VerificationBackendResource(engine={"rcpt_per_sessoin": 3}).engine_settings()
