"""The Airflow provider of listhygiene (being built)."""


def get_provider_info() -> dict[str, object]:
    """Airflow's provider metadata (entry point ``apache_airflow_provider``)."""
    return {"package-name": "listhygiene", "name": "listhygiene", "description": "listhygiene"}
