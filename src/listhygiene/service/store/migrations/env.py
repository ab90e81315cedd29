"""Alembic environment: migrations run on the connection that :mod:`..migrate` passes in.

Run outside the service (``alembic -x url=… revision --autogenerate``, from a configuration
whose ``script_location`` is this folder), it opens its own connection instead.
"""

from alembic import context
from sqlalchemy import Connection

from listhygiene.db.engine import make_engine
from listhygiene.service.store.migrate import VERSION_TABLE
from listhygiene.service.store.models import Base

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise RuntimeError("no database: pass -x url=… or set sqlalchemy.url")
    return url


if context.is_offline_mode():
    context.configure(
        url=_url(),
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()
elif (given := config.attributes.get("connection")) is not None:
    _run(given)
else:
    engine = make_engine(_url())
    try:
        with engine.begin() as connection:
            _run(connection)
    finally:
        engine.dispose()
