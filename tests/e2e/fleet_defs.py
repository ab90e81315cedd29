"""The end-to-end Dagster deployment's second code location (tests/e2e/test_dagster.py): the
chunked clean job of docs/dagster.md, "One list on several processes", for the fleet runs of
tests/e2e/fleet.py. Where the engine looks (the fleet sandbox) and the shared limit are given
in each run's config, as ``dagster job launch --config-json`` gives them.

    dagster dev -f dagster_defs/definitions.py -f tests/e2e/fleet_defs.py

Outputs go under ``$LISTHYGIENE_DAGSTER_DIR/fleet/fleet_chunks/<run id>/``.
"""

import os
import tempfile
from pathlib import Path

import dagster as dg
from listhygiene_dagster import VerificationBackendResource
from listhygiene_dagster.chunks import build_chunked_clean_job

DATA = Path(
    os.environ.get("LISTHYGIENE_DAGSTER_DIR", Path(tempfile.gettempdir()) / "listhygiene-dagster")
)


fleet_chunks = build_chunked_clean_job(
    name="fleet_chunks",
    source=str(DATA / "fleet.csv"),  # the run config names the list
    output_dir=str(DATA / "fleet"),
    chunks=2,
)

defs = dg.Definitions(
    jobs=[fleet_chunks],
    resources={"verification_backend": VerificationBackendResource(kind="local")},
)
