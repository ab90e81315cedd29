"""The Dagster integration of listhygiene (being built)."""
