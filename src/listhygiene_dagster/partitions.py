"""Partitions for large lists: fixed chunks of one big list, or one partition per export file.

* :func:`row_chunks` cuts one source into chunks of rows (``rows-1-50000``, ``rows-50001-100000``
  ...). Each chunk is read in one streaming pass, verified and published on its own, and a failed
  chunk is run again alone. An address that appears in two chunks is verified in both.
* :func:`export_files` gives one dynamic partition per file of a folder of exports; the sensor of
  :func:`~listhygiene_dagster.sensors.build_export_sensor` adds a partition when a file lands.

A partition key is read by :class:`~listhygiene_dagster.resources.ContactSourceResource`: a chunk
key selects rows of its ``path``, any other key names a file inside the folder ``path``.
"""

import dagster as dg
from listhygiene_dagster.resources import chunk_key

__all__ = ["export_files", "row_chunks"]


def row_chunks(*, total_rows: int, rows_per_chunk: int) -> dg.StaticPartitionsDefinition:
    """Chunks of ``rows_per_chunk`` rows covering ``total_rows`` rows (at least one chunk).

    Rows past ``total_rows`` belong to no chunk: declare the list's size with room to grow.
    """
    if rows_per_chunk < 1:
        raise ValueError("rows_per_chunk must be 1 or more")
    if total_rows < 0:
        raise ValueError("total_rows must be 0 or more")
    keys = [
        chunk_key(first, min(first + rows_per_chunk - 1, max(total_rows, 1)))
        for first in range(1, max(total_rows, 1) + 1, rows_per_chunk)
    ]
    return dg.StaticPartitionsDefinition(keys)


def export_files(name: str) -> dg.DynamicPartitionsDefinition:
    """One partition per export file (its name), added by the export sensor."""
    return dg.DynamicPartitionsDefinition(name=name)
