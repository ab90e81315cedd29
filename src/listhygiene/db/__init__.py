"""SQL databases as listhygiene uses them (the service's store, the verdict store): engines set
up for several threads and processes, and migrations shipped in the package."""

from listhygiene.db.engine import make_engine, normalize_url, transaction
from listhygiene.db.migrate import alembic_config, upgrade

__all__ = ["alembic_config", "make_engine", "normalize_url", "transaction", "upgrade"]
