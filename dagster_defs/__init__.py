"""Example Dagster definitions of listhygiene (``dagster dev -f dagster_defs/definitions.py``)."""
