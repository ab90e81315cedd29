"""The Airflow provider of listhygiene: a connection type, a hook, a deferrable operator, a
trigger and a sensor, as a thin layer over :mod:`listhygiene` (no verification logic here).

Layout, as official providers have it::

    hooks/verification.py       ListHygieneHook: the backend of a connection, job statuses
    operators/verification.py   EmailVerificationOperator: clean a list, defer while a job runs
    operators/feedback.py       FeedbackOperator: an email service's events into the verdict store
    triggers/verification.py    VerificationJobTrigger: waits asynchronously for remote jobs
    sensors/verification.py     VerificationJobSensor: waits for an existing job id
    chunks.py                   split_list / merge_outputs for dynamic task mapping

Registered through the ``apache_airflow_provider`` entry point (see :func:`get_provider_info`).
"""

from typing import Any

from listhygiene._version import __version__

__all__ = ["__version__", "get_provider_info"]

#: Connection form fields (``conn-fields``): JSON schema, stored in the connection's extras.
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "backend": {
        "label": "Backend",
        "schema": {"type": "string", "enum": ["local", "form-a", "form-b"], "default": "local"},
        "description": "local (this worker's own engine), form-a or form-b (a remote service).",
    },
    "base_url": {
        "label": "Base URL",
        "schema": {"type": ["string", "null"]},
        "description": "Remote service, ending in /v1 (e.g. https://verify.example/b/v1). "
        "The Host field may carry it instead.",
    },
    "api_key_header": {
        "label": "Form A key header",
        "schema": {"type": ["string", "null"], "default": "LISTHYGIENE-API-KEY"},
        "description": "Form A only: the name of the header that carries the key.",
    },
    "file_threshold": {
        "label": "Form A file-job threshold",
        "schema": {"type": ["integer", "null"], "minimum": 0, "default": 200},
        "description": "Form A only: lists longer than this go as file jobs (the operator then "
        "defers); shorter ones through /verify/bulk on the worker.",
    },
    "events_path": {
        "label": "Webhook event store",
        "schema": {"type": ["string", "null"]},
        "description": "SQLite file filled by `listhygiene receive-webhooks`: the trigger "
        "watches it instead of polling the service.",
    },
    "dns_server": {
        "label": "DNS server (local engine)",
        "schema": {"type": ["string", "null"]},
        "description": "host[:port] of the resolver the local engine asks.",
    },
    "smtp_port": {
        "label": "SMTP port (local engine)",
        "schema": {"type": ["integer", "null"], "minimum": 1, "maximum": 65535},
    },
    "helo": {"label": "HELO name (local engine)", "schema": {"type": ["string", "null"]}},
    "allow_private_mx": {
        "label": "Allow private MX (local engine)",
        "schema": {"type": ["boolean", "null"]},
    },
    "verdicts_conn_id": {
        "label": "Verdict store connection",
        "schema": {"type": ["string", "null"]},
        "description": "An Airflow database connection (Postgres) holding the verdict store "
        "every task of this connection reuses fresh verdicts from.",
    },
    "verdicts": {
        "label": "Verdict store URL",
        "schema": {"type": ["string", "null"]},
        "description": "Instead of a connection: a SQLAlchemy URL, or none for no store. "
        "Empty: LISTHYGIENE_VERDICTS, else a SQLite file in the worker's cache.",
    },
    "max_age": {
        "label": "Verdict max age",
        "schema": {"type": ["string", "null"]},
        "description": "How old a reused verdict may be: 30d, or per status valid=14d,risky=1d.",
    },
    "check_smtp": {
        "label": "Probe mailboxes over SMTP",
        "schema": {"type": ["boolean", "null"]},
        "description": "Default of the operators' check_smtp.",
    },
}


def get_provider_info() -> dict[str, Any]:
    """Airflow's provider metadata (entry point group ``apache_airflow_provider``)."""
    return {
        "package-name": "listhygiene",
        "name": "listhygiene",
        "description": "Batch email-list hygiene: verify address tables with the local engine "
        "or a remote service (form A or form B), one Parquet file per status.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "listhygiene",
                "external-doc-url": "https://github.com/listhygiene/listhygiene",
                "tags": ["service"],
            }
        ],
        "hooks": [
            {
                "integration-name": "listhygiene",
                "python-modules": ["listhygiene_airflow.hooks.verification"],
            }
        ],
        "operators": [
            {
                "integration-name": "listhygiene",
                "python-modules": ["listhygiene_airflow.operators.verification"],
            }
        ],
        "sensors": [
            {
                "integration-name": "listhygiene",
                "python-modules": ["listhygiene_airflow.sensors.verification"],
            }
        ],
        "triggers": [
            {
                "integration-name": "listhygiene",
                "python-modules": ["listhygiene_airflow.triggers.verification"],
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "listhygiene_airflow.hooks.verification.ListHygieneHook",
                "connection-type": "listhygiene",
                "hook-name": "listhygiene",
                "conn-fields": CONN_FIELDS,
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port", "login"],
                    "relabeling": {"host": "Base URL", "password": "API key"},
                    "placeholders": {
                        "host": "https://verify.example/b/v1 (remote backends only)",
                        "password": "the service's API key",
                        "backend": "local",
                    },
                },
            }
        ],
    }
