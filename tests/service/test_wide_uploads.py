"""A wide upload is bounded by its cells, not by how pyarrow would parse it (issue 28, item 4).

pyarrow's CSV parser reserves buffers for every column from the whole chunk, so a file of 50 rows
and 10,000 columns (1.5 MB, 500,000 cells: within ``MAX_CELLS``) used to pass the parse child's
1 GiB of address space and be refused 413. Against a real ``listhygiene serve``.
"""

import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from listhygiene.sandbox import Sandbox
from listhygiene.service.store import Store
from tests.service.live import Server, a


def wide_csv(rows: int, columns: int) -> bytes:
    numbers = random.Random(1)
    lines = ["email," + ",".join(f"c{i}" for i in range(columns - 1))]
    for row in range(rows):
        cells = ",".join(str(numbers.randint(0, 99)) for _ in range(columns - 1))
        lines.append(f"user{row}@example.test,{cells}")
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def served(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    folder = tmp_path_factory.mktemp("wide")
    db = f"sqlite:///{folder / 'store.db'}"
    with Store(db) as store:
        key = store.create_key("wide", 1_000_000)[0]
    server = Server(db, sandbox, args=(), log=folder / "server.log")
    try:
        yield server, key
    finally:
        server.stop()


def test_a_csv_of_ten_thousand_columns_is_accepted(served: Any) -> None:
    server, key = served
    content = wide_csv(50, 10_000)
    assert len(content) > 1_000_000
    with httpx.Client(base_url=server.base, headers=a(key), timeout=300) as client:
        answer = client.post("/verify/file", files={"file": ("wide.csv", content)})
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    assert data["total_rows"] == 50
    assert data["unique_emails"] == 50
    assert data["email_column"] == "email"
