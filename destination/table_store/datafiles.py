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
from destination.table_store.layout import data_file_name
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


class BucketFiles:
    """One data file per bucket, written in row groups as rows arrive (a load task's output). Buffers are
    flushed together once they hold `flush_rows` rows, which bounds the task's memory."""

    def __init__(self, storage: Storage, directory: str, table_def: TableDef, flush_rows: int = 400_000) -> None:
        self.storage, self.directory, self.table_def = storage, directory, table_def
        self.schema = arrow_schema(table_def.columns)
        self.flush_rows = flush_rows
        self._buffers: dict[int, list[pa.Table]] = {}
        self._buffered = 0
        self._open: dict[int, tuple[str, Any, pq.ParquetWriter]] = {}
        self._stats: dict[int, DataFile] = {}

    def add(self, bucket: int, rows: pa.Table) -> None:
        if not rows.num_rows:
            return
        if not rows.schema.equals(self.schema):
            rows = rows.select(self.schema.names).cast(self.schema)
        self._buffers.setdefault(bucket, []).append(rows)
        self._buffered += rows.num_rows
        if self._buffered >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        for bucket, parts in self._buffers.items():
            table = pa.concat_tables(parts)
            if bucket not in self._open:
                name = data_file_name(bucket)
                sink = self.storage.open_output(f"{self.directory}/{name}")
                self._open[bucket] = (name, sink, pq.ParquetWriter(
                    sink, self.schema, compression=PARQUET_COMPRESSION, coerce_timestamps="us",
                    allow_truncated_timestamps=False, store_schema=False))
                self._stats[bucket] = DataFile(name, 0, 0, bucket)
            self._open[bucket][2].write_table(table, row_group_size=ROW_GROUP_ROWS)
            lo, hi = synced_range(table)
            seen = self._stats[bucket]
            self._stats[bucket] = DataFile(seen.name, seen.rows + table.num_rows, 0, bucket,
                                           _extreme(min, seen.min_synced, lo), _extreme(max, seen.max_synced, hi))
        self._buffers.clear()
        self._buffered = 0

    def close(self) -> list[DataFile]:
        self.flush()
        out = []
        for bucket, (name, sink, writer) in self._open.items():
            writer.close()
            sink.close()
            stats = self._stats[bucket]
            out.append(DataFile(name, stats.rows, self.storage.size(f"{self.directory}/{name}"), bucket,
                                stats.min_synced, stats.max_synced))
        return out


def _extreme(pick: Any, a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else pick(a, b)
