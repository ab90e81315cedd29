"""Refresh the vendored role list from its maintained source (docs/engine.md, "Lists").

The source is the npm package ``role-based-email-addresses`` (Mixmax, MIT licence): about a
thousand local parts of shared mailboxes, in four groups. This script downloads the latest
release through the npm registry's JSON interface, reads the quoted strings of its arrays, and
writes ``src/listhygiene/engine/data/role_local_parts.txt`` (with the version it came from) and
the licence beside it. The project's own additions stay in ``role_local_parts_extra.txt``.

    .venv/bin/python scripts/refresh_role_list.py            # latest release
    .venv/bin/python scripts/refresh_role_list.py --version 3.1.0
"""

import argparse
import io
import json
import re
import tarfile
import urllib.request
from pathlib import Path

PACKAGE = "role-based-email-addresses"
REGISTRY = "https://registry.npmjs.org"
DATA = Path(__file__).resolve().parents[1] / "src" / "listhygiene" / "engine" / "data"
_ENTRY = re.compile(r"""^\s*['"]([^'"]+)['"],?\s*$""", re.MULTILINE)


def fetch(version: str) -> tuple[str, bytes]:
    """(resolved version, the release tarball)."""
    with urllib.request.urlopen(f"{REGISTRY}/{PACKAGE}/{version}", timeout=30) as response:
        meta = json.load(response)
    with urllib.request.urlopen(meta["dist"]["tarball"], timeout=60) as response:
        return meta["version"], response.read()


def parse(source: str) -> list[str]:
    """Every quoted entry of the module's arrays, lower case, distinct, sorted."""
    return sorted({entry.strip().lower() for entry in _ENTRY.findall(source) if entry.strip()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="latest")
    args = parser.parse_args()
    version, tarball = fetch(args.version)
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        source = archive.extractfile("package/src/index.js").read().decode("utf-8")  # type: ignore[union-attr]
        licence = archive.extractfile("package/LICENSE").read().decode("utf-8")  # type: ignore[union-attr]
    entries = parse(source)
    header = (
        f"# Role local parts from the npm package {PACKAGE} {version} (Mixmax, MIT licence:\n"
        "# role_local_parts.LICENSE). Written by scripts/refresh_role_list.py; do not edit by\n"
        "# hand: the project's own additions are in role_local_parts_extra.txt.\n"
    )
    (DATA / "role_local_parts.txt").write_text(header + "\n".join(entries) + "\n", "utf-8")
    (DATA / "role_local_parts.LICENSE").write_text(licence, "utf-8")
    print(f"{PACKAGE} {version}: {len(entries)} local parts")


if __name__ == "__main__":
    main()
