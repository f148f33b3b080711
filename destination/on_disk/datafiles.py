"""Writing and reading the data files of a version, with their statistics, in the table's records format.

Parquet is written here; Avro and the delimited variants through their codecs (destination/records_formats/),
chosen by the table definition's format, and a file's name carries its format's suffix. Reading goes by the name's
suffix: a Parquet file describes itself, an Avro or delimited one is read with the definition and hints of the
version that wrote it (the `_table.json` of its directory; every file of a version is written under that version's
definition, as AlterTable rewrites every file). Used both by the server (empty tables, carried files) and inside
Spark tasks.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from destination.model.field_ids import data_file_schema
from destination.model.key_order import first_and_last
from destination.model.keys import key_tokens, run_starts
from destination.model.table_model import SYNCED, ColumnDef, TableDef
from destination.model.type_mapping import arrow_schema
from destination.on_disk.layout import data_file_name
from destination.on_disk.records import TABLE_JSON
from destination.records_formats.codec import format_of_name, table_codec
from destination.runtime.errors import BadRequest, DamagedDataFile, scrub
from destination.storage.base import Storage

PARQUET_COMPRESSION = "snappy"  # read by Redshift, Spectrum, Spark, pandas and records-mover alike
ROW_GROUP_ROWS = 256_000
# every data file is written with these (timestamps stay µs; no pandas/Arrow schema blob in the footer)
WRITE_OPTIONS: dict[str, Any] = {"compression": PARQUET_COMPRESSION, "coerce_timestamps": "us",
                                 "allow_truncated_timestamps": False, "store_schema": False}
DICTIONARY_SAMPLE_ROWS = 8192


def dictionary_columns(table: pa.Table) -> list[str]:
    """The columns worth dictionary encoding: those whose values repeat in a sample of the first rows (at most
    half of them distinct). On a column of mostly distinct values pyarrow builds a dictionary, gives up at its
    page limit and writes the values plainly anyway; measured on the benchmark's 700,000-row file, trying it on
    every column took 0.62 s of the write and this choice 0.27 s, and the file came out 7 % smaller."""
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    if not sample.num_rows:
        return []
    return [name for name, values in zip(sample.column_names, sample.columns, strict=True)
            if _distinct_values(values) * 2 <= sample.num_rows]


def _distinct_values(values: pa.ChunkedArray) -> int:
    """How many distinct non-NULL values: `pc.count_distinct`'s count, from the length of `pc.unique` (which lists
    NULL once when there is one), a third cheaper. Measured on a small sync's 20,000-row file of the benchmark's 23
    columns: the choice took 5.3 ms that way, about as long as writing the file (6.7 ms), and 3.5 ms this way."""
    return len(pc.unique(values)) - (1 if values.null_count else 0)


def write_options(table: pa.Table) -> dict[str, Any]:
    """WRITE_OPTIONS with the dictionary encoding chosen for `table`'s columns: what every Parquet file this
    destination writes (data, change and change data files) is written with."""
    return {**WRITE_OPTIONS, "use_dictionary": dictionary_columns(table)}


@dataclass(frozen=True, kw_only=True)
class DataFile:
    """Per-file statistics kept in `_files.json`; timestamps are epoch microseconds. Keyword-only: a copy under
    another name is `dataclasses.replace(f, name=…)`, which keeps every statistic."""

    name: str
    rows: int
    bytes: int
    bucket: int | None  # key-hash bucket; None for the zero-row file of an empty table
    stored_in: str | None = None  # the version directory (v<N>) holding the file; None: the listing version's own
    # complete layout: the version directory where a carried file was first written (the listing version holds a
    # copy); the Delta and Iceberg metadata reference that one, so retention keeps it. None: where it is stored
    written_in: str | None = None
    min_synced: int | None = None
    max_synced: int | None = None
    key_range: dict[str, list[Any]] | None = None  # per key column: [min, max] in its comparable form (KeyRange)
    # the file's first and last entity key in key order (destination.model.key_order): files of a table placed in key
    # ranges never overlap, so these route a key to the one file that can hold it
    first_key: list[Any] | None = None
    last_key: list[Any] | None = None

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


# ---- per key column min/max (`key_range` in _files.json): a statistic for readers and tools. Placement uses each
# file's first and last key (destination.model.key_order). Values are kept in a form JSON keeps exactly: integers for
# integer, date, time and timestamp columns (days, µs), floats for FLOAT/DOUBLE, text for strings and decimals. Other
# key types, NaN or infinite bounds, and text longer than RANGE_TEXT_LIMIT keep no range.
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


def statistics(table: pa.Table, table_def: TableDef, *, name: str, size: int, bucket: int | None,
               in_key_order: bool = False) -> DataFile:
    """The `_files.json` entry of a data file holding `table` (`in_key_order`: its rows are sorted already)."""
    lo, hi = synced_range(table)
    ends = first_and_last(table, table_def, in_key_order)
    return DataFile(name=name, rows=table.num_rows, bytes=size, bucket=bucket, min_synced=lo, max_synced=hi,
                    key_range=key_range(table, table_def), first_key=ends[0] if ends else None,
                    last_key=ends[1] if ends else None)


def write_data_file(storage: Storage, directory: str, name: str, table: pa.Table, table_def: TableDef,
                    bucket: int | None, in_key_order: bool = False) -> DataFile:
    """Write `table` as one data file in the table's records format (Parquet: in the file schema, with the columns'
    field ids) and return its statistics; the name's suffix becomes the format's."""
    schema = data_file_schema(table_def)
    table = table.select(schema.names).cast(schema)
    codec = table_codec(table_def)
    name = named_for(name, codec.suffix)
    path = f"{directory}/{name}"
    with storage.open_output(path) as sink:
        if codec.records_format == "parquet":
            pq.write_table(table, sink, row_group_size=ROW_GROUP_ROWS, **write_options(table))
        else:  # the rows as stored: a delimited variant NULLs (and records) the values it cannot hold
            table = codec.write(table, table_def, sink).cast(schema)
        size = sink.tell()  # the bytes written are the object's: no request to ask the store
    return statistics(table, table_def, name=name, size=size, bucket=bucket, in_key_order=in_key_order)


def write_sorted_files(storage: Storage, directory: str, rows: pa.Table, table_def: TableDef,
                       target_bytes: int) -> list[DataFile]:
    """Rows already in key order, written as consecutive files of about `target_bytes` each: row groups are
    appended to a file until its size reaches the target. A file never ends inside a run of one entity key (a
    history table's versions of a row stay together), and a tail shorter than a row group joins the last file.
    The files carry the columns' field ids, as `write_data_file`'s do."""
    schema = data_file_schema(table_def)
    rows = rows.select(schema.names).cast(schema)
    n = rows.num_rows
    if not n:
        return []
    if table_def.stored_format != "parquet":
        return _write_sorted_pieces(storage, directory, rows, table_def, target_bytes)
    # a guess of the rows per file from the decoded size (Parquet is usually 2-5x smaller); the measured size of
    # the file being written decides where it ends
    per_row = max(1.0, rows.nbytes / n / 3)
    group = int(max(1, min(ROW_GROUP_ROWS, target_bytes / per_row / 4)))
    starts = _entity_starts(rows, table_def)
    options = write_options(rows)
    files: list[DataFile] = []
    begin = 0
    while begin < n:
        name = data_file_name("part")
        path = f"{directory}/{name}"
        end = begin
        with storage.open_output(path) as sink:
            with pq.ParquetWriter(sink, schema, **options) as writer:
                while end < n:
                    stop = _next_start(starts, end + group, n)
                    if n - stop < group:  # too short for a file or row group of its own
                        stop = n
                    writer.write_table(rows.slice(end, stop - end), row_group_size=stop - end)
                    end = stop
                    if sink.tell() >= target_bytes:
                        break
            size = sink.tell()  # the footer included
        part = rows.slice(begin, end - begin)
        files.append(statistics(part, table_def, name=name, size=size, bucket=None, in_key_order=True))
        begin = end
    return files


def _entity_starts(rows: pa.Table, table_def: TableDef) -> np.ndarray | None:
    """Row positions where a new entity key begins, for tables whose key repeats (history); None: every row."""
    if not table_def.is_history:
        return None
    return np.flatnonzero(run_starts(key_tokens(rows, table_def.entity_key)))


def _next_start(starts: np.ndarray | None, position: int, n: int) -> int:
    """The first entity start at or after `position`; `n` (the end) when the last entity runs past it."""
    if starts is None or position >= n:
        return min(position, n)
    i = int(np.searchsorted(starts, position))
    return int(starts[i]) if i < len(starts) else n


def _write_sorted_pieces(storage: Storage, directory: str, rows: pa.Table, table_def: TableDef,
                         target_bytes: int) -> list[DataFile]:
    """`write_sorted_files` for the formats written whole by their codecs: the rows cut into files of about
    `target_bytes` by their decoded size (Avro and text hold about what Arrow does; compressed text less), never
    inside a run of one entity key."""
    n = rows.num_rows
    per_file = int(max(1, target_bytes / max(1.0, rows.nbytes / n)))
    starts = _entity_starts(rows, table_def)
    files: list[DataFile] = []
    begin = 0
    while begin < n:
        end = _next_start(starts, begin + per_file, n)
        if n - end < per_file // 4:  # a short tail joins this file
            end = n
        files.append(write_data_file(storage, directory, data_file_name("part"), rows.slice(begin, end - begin),
                                     table_def, None, in_key_order=True))
        begin = end
    return files


def named_for(name: str, suffix: str) -> str:
    """`name` (layout.data_file_name's, ending .parquet) with the records format's suffix instead."""
    return name if name.endswith(suffix) else name.rsplit(".parquet", 1)[0] + suffix


def written_under(storage: Storage, directory: str) -> TableDef:
    """The definition the data files of a version directory were written under (its `_table.json`)."""
    return TableDef.from_json(json.loads(storage.read_bytes(f"{directory}/{TABLE_JSON}"))["table"])


def read_data_file(storage: Storage, directory: str, name: str, columns: list[str] | None = None,
                   size: int | None = None) -> pa.Table:
    """A data file's rows (`columns` of them, or all): Parquet as stored, the other formats in the data-file
    schema of the definition they were written under. `size`: the file's, when known (Storage.open_input)."""
    path = f"{directory}/{name}"
    if format_of_name(name) == "parquet":
        with storage.open_input(path, size) as source:  # its OSErrors are the storage's: translated by it
            try:
                return pq.read_table(source, columns=columns)
            except (pa.ArrowInvalid, OSError) as e:
                if isinstance(e, OSError) and not _parquet_decoding(e):
                    raise
                first = str(e).strip().splitlines()  # Parquet's messages say what is wrong with the file's structure
                raise DamagedDataFile(f"data file {storage.url(path)} does not read as Parquet: "
                                      f"{scrub(first[0]) if first else type(e).__name__}") from None
    table_def = written_under(storage, directory)
    with storage.open_input(path, size) as source:
        try:
            table = table_codec(table_def).read(source, table_def)
        except BadRequest as e:  # the codec names the table and column (never a value): the file is named here
            raise DamagedDataFile(f"data file {storage.url(path)}: {e}") from None
    return table.select(columns) if columns is not None else table


def _parquet_decoding(exc: OSError) -> bool:
    """Whether an OSError from pyarrow's Parquet reader is about the bytes (a thrift structure, a page, a codec's
    stream: Arrow's IOError without an errno) rather than reading them: the operating system's errors carry an errno,
    and S3's (through Arrow's S3 filesystem) say "AWS Error"."""
    return exc.errno is None and "AWS Error" not in str(exc)


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
