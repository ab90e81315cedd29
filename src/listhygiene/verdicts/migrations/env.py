"""Alembic environment of the verdict store: migrations run on the connection that
:func:`listhygiene.verdicts.schema.upgrade` passes in."""

from alembic import context

from listhygiene.verdicts.schema import VERSION_TABLE, metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("the verdict store migrates through listhygiene.verdicts.schema.upgrade")
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
