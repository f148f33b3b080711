"""Writing and reading the Parquet data files of a version, with their statistics.

Used both by the server (empty tables, carried files) and inside Spark tasks.
"""
from __future__ import annotations

import decimal
import math
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from destination.storage.base import Storage
from destination.table_model import SYNCED, ColumnDef, TableDef
from destination.table_store.layout import data_file_name
from destination.type_mapping import arrow_schema

PARQUET_COMPRESSION = "snappy"  # read by Redshift, Spectrum, Spark, pandas and records-mover alike
ROW_GROUP_ROWS = 256_000
# every data file is written with these (timestamps stay µs; no pandas/Arrow schema blob in the footer)
WRITE_OPTIONS: dict[str, Any] = {"compression": PARQUET_COMPRESSION, "coerce_timestamps": "us",
                                 "allow_truncated_timestamps": False, "store_schema": False}


@dataclass(frozen=True, kw_only=True)
class DataFile:
    """Per-file statistics kept in `_files.json`; timestamps are epoch microseconds. Keyword-only: a copy under
    another name is `dataclasses.replace(f, name=…)`, which keeps every statistic."""

    name: str
    rows: int
    bytes: int
    bucket: int | None  # key-hash bucket; None for the zero-row file of an empty table
    stored_in: str | None = None  # the version directory (v<N>) holding the file; None: the listing version's own
    min_synced: int | None = None
    max_synced: int | None = None
    key_range: dict[str, list[Any]] | None = None  # per key column: [min, max] in its comparable form (KeyRange)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> DataFile:
        return DataFile(**data)


def synced_range(table: pa.Table) -> tuple[int | None, int | None]:
    if SYNCED not in table.column_names or table.num_rows == 0:
        return None, None
    mm = pc.min_max(table.column(SYNCED).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()))
    return mm["min"].as_py(), mm["max"].as_py()


# ---- key ranges: which files a request's keys can be in (read no key column of the others) ------------------
# Values are compared in a form JSON keeps exactly: integers for integer, date, time and timestamp columns (days,
# µs), floats for FLOAT/DOUBLE, text for strings and decimals (compared as decimals). Other key types, and text
# longer than RANGE_TEXT_LIMIT, keep no range: their files are always read.
RANGE_TEXT_LIMIT = 256
_INTEGRAL = ("SHORT", "INT", "LONG", "NAIVE_DATE", "NAIVE_TIME", "NAIVE_DATETIME", "UTC_DATETIME")
_TEXTUAL = ("STRING", "JSON", "XML")


def _comparable(values: pa.Array | pa.ChunkedArray, col: ColumnDef) -> pa.Array | pa.ChunkedArray | None:
    if col.type in _INTEGRAL:
        return values.cast(pa.int64()) if col.type != "NAIVE_DATE" else values.cast(pa.int32()).cast(pa.int64())
    if col.type in ("FLOAT", "DOUBLE"):
        return values.cast(pa.float64())
    if col.type in _TEXTUAL or col.type == "DECIMAL":
        return values
    return None


def _bound(value: Any, col: ColumnDef) -> Any:
    """A JSON bound back to what _comparable's values compare with."""
    return decimal.Decimal(value) if col.type == "DECIMAL" else value


def key_range(table: pa.Table, table_def: TableDef) -> dict[str, list[Any]] | None:
    if not table.num_rows:
        return None
    out: dict[str, list[Any]] = {}
    for col in table_def.entity_key:
        values = _comparable(table.column(col.name), col)
        if values is None:
            continue
        mm = pc.min_max(values)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is None or (isinstance(lo, float) and not (math.isfinite(lo) and math.isfinite(hi))):
            continue
        if col.type == "DECIMAL":
            lo, hi = str(lo), str(hi)
        elif col.type in _TEXTUAL and max(len(lo), len(hi)) > RANGE_TEXT_LIMIT:
            continue
        out[col.name] = [lo, hi]
    return out or None


def union_range(a: dict[str, list[Any]] | None, b: dict[str, list[Any]] | None,
                table_def: TableDef) -> dict[str, list[Any]] | None:
    """The range covering both (only columns both have a range for)."""
    if a is None or b is None:
        return None
    out = {}
    for col in table_def.entity_key:
        if col.name in a and col.name in b:
            (lo1, hi1), (lo2, hi2) = a[col.name], b[col.name]
            lo = lo1 if _bound(lo1, col) <= _bound(lo2, col) else lo2
            hi = hi1 if _bound(hi1, col) >= _bound(hi2, col) else hi2
            out[col.name] = [lo, hi]
    return out or None


def may_hold(ops: pa.Table, key_range: dict[str, list[Any]] | None, table_def: TableDef) -> bool:
    """Whether a file with `key_range` can hold one of the keys in `ops` (False: none of them)."""
    if not key_range or not ops.num_rows:
        return bool(ops.num_rows)
    inside = pa.array(np.ones(ops.num_rows, dtype=bool))
    for col in table_def.entity_key:
        if col.name not in key_range:
            continue
        values = _comparable(ops.column(col.name), col)
        if values is None:  # a key type that keeps no range does not narrow the file down
            continue
        lo, hi = (pa.scalar(_bound(v, col), values.type) for v in key_range[col.name])
        within = pc.and_(pc.greater_equal(values, lo), pc.less_equal(values, hi))
        if col.type in ("FLOAT", "DOUBLE"):  # NaN is one key (its token) but outside every range: read the file
            within = pc.or_(within, pc.is_nan(values))
        inside = pc.and_kleene(inside, within)
    return bool(pc.any(pc.fill_null(inside, True)).as_py())  # NULL (keyless tables): unknown, so read the file


def write_data_file(storage: Storage, directory: str, name: str, table: pa.Table, table_def: TableDef,
                    bucket: int | None) -> DataFile:
    """Write `table` (already in the file schema) as one Parquet file and return its statistics."""
    schema = arrow_schema(table_def.columns)
    table = table.select(schema.names).cast(schema)
    path = f"{directory}/{name}"
    with storage.open_output(path) as sink:
        pq.write_table(table, sink, row_group_size=ROW_GROUP_ROWS, **WRITE_OPTIONS)
    lo, hi = synced_range(table)
    return DataFile(name=name, rows=table.num_rows, bytes=storage.size(path), bucket=bucket, min_synced=lo, max_synced=hi,
                    key_range=key_range(table, table_def))


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
        self._sinks = ExitStack()  # the open output streams, closed by close()
        self._writers: dict[int, pq.ParquetWriter] = {}
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
        with self.storage.translated("write", self.directory):
            self._flush()

    def _flush(self) -> None:
        for bucket, parts in self._buffers.items():
            table = pa.concat_tables(parts)
            if bucket not in self._writers:
                name = data_file_name(bucket)
                sink = self._sinks.enter_context(self.storage.open_output(f"{self.directory}/{name}"))
                self._writers[bucket] = pq.ParquetWriter(sink, self.schema, **WRITE_OPTIONS)
                self._stats[bucket] = DataFile(name=name, rows=0, bytes=0, bucket=bucket)
            self._writers[bucket].write_table(table, row_group_size=ROW_GROUP_ROWS)
            lo, hi = synced_range(table)
            seen = self._stats[bucket]
            rows = key_range(table, self.table_def)
            self._stats[bucket] = replace(
                seen, rows=seen.rows + table.num_rows, min_synced=_extreme(min, seen.min_synced, lo),
                max_synced=_extreme(max, seen.max_synced, hi),
                key_range=rows if not seen.rows else union_range(seen.key_range, rows, self.table_def))
        self._buffers.clear()
        self._buffered = 0

    def close(self) -> list[DataFile]:
        self.flush()
        with self.storage.translated("write", self.directory):
            for writer in self._writers.values():
                writer.close()
            self._sinks.close()
        return [replace(stats, bytes=self.storage.size(f"{self.directory}/{stats.name}"))
                for stats in self._stats.values()]


def _extreme(pick: Any, a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else pick(a, b)
