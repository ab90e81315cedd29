"""The service's database: schema, migrations, API keys, credits and rate windows.

SQLite (one server process, the default) or PostgreSQL (several), through SQLAlchemy, with the
schema managed by Alembic migrations shipped in this package. See :mod:`.store` for the design.
"""

from listhygiene.db.engine import make_engine
from listhygiene.service.store.limits import Limit, form_a_limit, form_b_limits
from listhygiene.service.store.migrate import current_revision, head, upgrade
from listhygiene.service.store.models import PLANS
from listhygiene.service.store.rows import ApiKeyRow, Credits, RateHit
from listhygiene.service.store.store import KEY_PREFIX, LIMIT_FIELDS, Store, hash_key

__all__ = [
    "KEY_PREFIX",
    "LIMIT_FIELDS",
    "PLANS",
    "ApiKeyRow",
    "Credits",
    "Limit",
    "RateHit",
    "Store",
    "current_revision",
    "form_a_limit",
    "form_b_limits",
    "hash_key",
    "head",
    "make_engine",
    "upgrade",
]
