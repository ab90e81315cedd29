"""fakesnow's server (the Snowflake emulator the tests run) on a port, refusing wrong passwords.

``python tests/pipeline/fakesnow_server.py PORT PASSWORD [DB.SCHEMA.TABLE=FILE.parquet ...]``
(or :func:`start`, on a free port): fakesnow's own Starlette routes, served by uvicorn on
127.0.0.1, except that a login whose password is not PASSWORD gets the answer Snowflake gives
(code 390100, "Incorrect username or password was specified."), which fakesnow itself never
does: it takes any password. Run as a process of its own, so that the connector under test
talks to it over HTTP, as it talks to Snowflake.

Each ``DB.SCHEMA.TABLE=FILE.parquet`` is loaded into the emulator's DuckDB before it serves, its
columns named in upper case as Snowflake names unquoted ones (benchmarks/pipeline.py's
``--input snowflake``: a million rows sent through the emulator's SQL would take an hour).
"""

import gzip
import json
import logging
import socket
import subprocess
import sys
import time
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # fakesnow and its server's packages are imported by the server process only
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

LOGIN = "/session/v1/login-request"


def app(password: str) -> "Starlette":
    import fakesnow.server
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def login(request: "Request") -> "Response":
        body = await request.body()  # kept by the request: fakesnow's handler reads it again
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if json.loads(body)["data"].get("PASSWORD") != password:
            return JSONResponse(
                {
                    "data": {"nextAction": "RETRY_LOGIN", "authnMethod": "USERNAME_PASSWORD"},
                    "code": "390100",
                    "message": "Incorrect username or password was specified.",
                    "success": False,
                }
            )
        return await fakesnow.server.login_request(request)

    routes = [r for r in fakesnow.server.routes if getattr(r, "path", None) != LOGIN]
    return Starlette(routes=[Route(LOGIN, login, methods=["POST"]), *routes])


def start(password: str, *loads: str, wait: float = 120) -> tuple[subprocess.Popen[bytes], int]:
    """This server as a process on a free port of 127.0.0.1, once it takes connections (each
    of ``loads`` a ``DB.SCHEMA.TABLE=FILE.parquet``); the caller stops it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = subprocess.Popen(
        [sys.executable, __file__, str(port), password, *loads], stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + wait
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return server, port
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(f"fakesnow's server did not start on port {port}") from None
            time.sleep(0.05)


def load(table: str, parquet: str) -> None:
    """A Parquet file as a table of the emulator (its database and schema made as needed)."""
    import fakesnow.server

    database, schema, name = table.upper().split(".")
    connection = fakesnow.server.shared_fs.connect(database, schema)
    duck = connection._duck_conn
    columns = duck.execute("SELECT * FROM read_parquet(?) LIMIT 0", [parquet]).description
    upper = ", ".join(f'"{c[0]}" AS "{c[0].upper()}"' for c in columns)
    duck.execute(
        f'CREATE OR REPLACE TABLE "{database}"."{schema}"."{name}" AS '
        f"SELECT {upper} FROM read_parquet(?)",
        [parquet],
    )


if __name__ == "__main__":
    logging.getLogger("fakesnow.server").setLevel(logging.WARNING)  # a line per session else
    warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")
    port, password = int(sys.argv[1]), sys.argv[2]
    for argument in sys.argv[3:]:
        load(*argument.split("=", 1))
    import uvicorn

    uvicorn.run(app(password), host="127.0.0.1", port=port, log_level="warning")
