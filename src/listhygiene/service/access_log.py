"""uvicorn's access log without query strings (docs/security.md).

A client that puts its API key in a query string (``?api_key=...``) by mistake must not have it
written to the server's log, where it outlives the request and reaches whoever reads logs. The
access log keeps the method, the path, the status and the client; never the query.
"""

import copy
import logging
from typing import Any

__all__ = ["WithoutQueryString", "log_config"]


class WithoutQueryString(logging.Filter):
    """Cuts the query string off the path of uvicorn's access records."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            path = args[2].split("?", 1)[0]
            record.args = (*args[:2], path, *args[3:])
        return True


def log_config() -> dict[str, Any]:
    """uvicorn's own logging configuration, with :class:`WithoutQueryString` on the access log."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["without_query"] = {"()": f"{__name__}.WithoutQueryString"}
    config["handlers"]["access"].setdefault("filters", []).append("without_query")
    return config
