"""The pipeline: an address table in; one Parquet file per status, checks and a report out."""
