"""Writing and reading the Parquet data files of a version, with their statistics.

Used both by the server (empty tables, carried files) and inside Spark tasks.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from destination.storage.base import Storage
from destination.table_model import SYNCED, TableDef
from destination.type_mapping import arrow_schema

PARQUET_COMPRESSION = "snappy"  # read by Redshift, Spectrum, Spark, pandas and records-mover alike
ROW_GROUP_ROWS = 256_000


@dataclass(frozen=True)
class DataFile:
    """Per-file statistics kept in `_files.json`; timestamps are epoch microseconds."""

    name: str
    rows: int
    bytes: int
    bucket: int | None  # key-hash bucket; None for the zero-row file of an empty table
    min_synced: int | None = None
    max_synced: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> "DataFile":
        return DataFile(**data)


def synced_range(table: pa.Table) -> tuple[int | None, int | None]:
    if SYNCED not in table.column_names or table.num_rows == 0:
        return None, None
    mm = pc.min_max(table.column(SYNCED).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()))
    return mm["min"].as_py(), mm["max"].as_py()


def write_data_file(storage: Storage, directory: str, name: str, table: pa.Table, table_def: TableDef,
                    bucket: int | None) -> DataFile:
    """Write `table` (already in the file schema) as one Parquet file and return its statistics."""
    schema = arrow_schema(table_def.columns)
    table = table.select(schema.names).cast(schema)
    path = f"{directory}/{name}"
    with storage.open_output(path) as sink:
        pq.write_table(table, sink, compression=PARQUET_COMPRESSION, coerce_timestamps="us",
                       allow_truncated_timestamps=False, row_group_size=ROW_GROUP_ROWS, store_schema=False)
    lo, hi = synced_range(table)
    return DataFile(name=name, rows=table.num_rows, bytes=storage.size(path), bucket=bucket, min_synced=lo, max_synced=hi)


def read_data_file(storage: Storage, directory: str, name: str, columns: list[str] | None = None) -> pa.Table:
    with storage.open_input(f"{directory}/{name}") as source:
        return pq.read_table(source, columns=columns)


def empty_table(table_def: TableDef) -> pa.Table:
    return arrow_schema(table_def.columns).empty_table()


def align(table: pa.Table, table_def: TableDef) -> pa.Table:
    """Conform a stored table to the definition: columns in order, missing ones NULL, types cast."""
    schema = arrow_schema(table_def.columns)
    arrays = []
    for f in schema:
        if f.name in table.column_names:
            arrays.append(table.column(f.name).cast(f.type))
        else:
            arrays.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)
