"""The self-hosted verification engine.

::

    from listhygiene.engine import Engine, EngineSettings

    engine = Engine(EngineSettings(check_smtp=True))
    result = await engine.verify("alice@example.com")
    async for result in engine.verify_many(addresses):
        ...

``listhygiene.verify`` and ``listhygiene.verify_many`` are the same without ``await``, for
notebooks and scripts.
"""

from listhygiene.engine.engine import Engine
from listhygiene.engine.health import RunHealth
from listhygiene.engine.settings import EngineOptions, EngineSettings
from listhygiene.engine.sync import verify, verify_many

__all__ = ["Engine", "EngineOptions", "EngineSettings", "RunHealth", "verify", "verify_many"]
