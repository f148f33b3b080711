"""Batch file → typed Arrow record batches, by the request's table definition.

CSV: columns are matched by header name in any order; comma separator, `"` quote,
doubled quotes, backslash is not an escape, newlines may sit inside quoted values.
The request's null marker (never quoted) means NULL; the unmodified marker means
"keep the stored value" and is returned as a per-column mask.
Parquet (Fivetran's Avro writer): instants and dates arrive as strings, binary as bytes.

Batches are yielded one block at a time, so memory stays bounded by a few blocks
whatever the file size; callers that need the whole file concatenate.
"""
from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import zstandard

from destination.batch_files.csvrows import (
    BOM,
    Chunk,
    MalformedRows,
    RowTooLarge,
    first_row_end,
    iter_row_chunks,
    parse_rows,
    read_ahead,
    read_rows,
)
from destination.batch_files.stream import open_plaintext
from destination.model.conversion import NULLED, SERIALIZATION_ERROR, Failure, JsonSeen, convert_column
from destination.model.table_model import ColumnDef
from destination.runtime.arrow_memory import arrow_owned
from destination.runtime.errors import BadBatchFile, scrub

# rows are parsed in chunks of about this size (larger when one row needs more): 1 MB chunks doubled the per-call
# overhead, and each MB more costs reader memory
CSV_BLOCK = 2 << 20


@dataclass(frozen=True)
class FileFormat:
    """How the request says its files are written."""

    encrypted: bool
    compression: str  # OFF | ZSTD | GZIP
    null_string: str
    unmodified_string: str
    kind: str = "csv"  # csv | parquet


@dataclass
class DecodedBatch:
    """One block of a batch file: typed columns present in the file, in table order."""

    table: pa.Table
    unmodified: dict[str, pa.Array] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)


def iter_batch_file(path: str, columns: list[ColumnDef], fmt: FileFormat, key: bytes | None,
                    required: list[str], source: BinaryIO | None = None) -> Iterator[DecodedBatch]:
    """Yield typed blocks of one batch file (read from `source`, its bytes as sent, when given: e.g. a copy staged
    in the table's storage); raises BadBatchFile naming the file."""
    stream = open_plaintext(path, key=key, encrypted=fmt.encrypted, compression=fmt.compression, source=source)
    try:
        if fmt.kind == "parquet":
            yield from _iter_parquet(path, stream, columns, fmt, required)
        else:
            yield from _iter_csv(path, stream, columns, fmt, required)
    except BadBatchFile:
        raise
    except (zstandard.ZstdError, EOFError, OSError) as exc:
        raise BadBatchFile(path, f"corrupt or truncated data: {scrub(str(exc))}") from None
    except pa.ArrowInvalid as exc:  # library text can echo row content: scrub it
        raise BadBatchFile(path, f"malformed content: {scrub(str(exc))}") from None
    finally:
        stream.close()


def read_header(path: str, row: Chunk) -> list[str]:
    """The column names of a CSV file's first row (without its line end or a BOM)."""
    if not row.strip():
        raise BadBatchFile(path, "CSV file is empty: no header row")
    text = row.decode("utf-8", errors="replace")
    try:
        header = next(csv.reader(io.StringIO(text, newline="")))
    except (StopIteration, csv.Error) as exc:
        raise BadBatchFile(path, f"cannot read the CSV header: {scrub(str(exc))}") from None
    if len(set(header)) != len(header):
        raise BadBatchFile(path, "CSV header repeats a column name")
    return header


def _check_columns(path: str, present: list[str], columns: list[ColumnDef], required: list[str]) -> None:
    missing = [c for c in required if c not in present]
    if missing:
        raise BadBatchFile(path, f"missing key column(s) {missing} (no header row, or not this table's file?)")
    if not any(c.name in present for c in columns):
        raise BadBatchFile(path, "none of the table's columns are in the header (file without a header row?)")


def _iter_csv(path: str, stream: BinaryIO, columns: list[ColumnDef], fmt: FileFormat,
              required: list[str]) -> Iterator[DecodedBatch]:
    chunks = read_ahead(iter_row_chunks(stream, CSV_BLOCK))
    first = next(chunks, b"")
    if first.startswith(BOM):  # an encoding mark, not part of the first column's name
        first = first[len(BOM):]
    header_end = first_row_end(first)
    header = read_header(path, first[:header_end])
    _check_columns(path, header, columns, required)
    known = {c.name for c in columns}
    wanted = [name for name in header if name in known]
    # the last column is always parsed: parse_rows checks with it that a chunk ended between rows
    parsed = wanted if header[-1] in known else [*wanted, header[-1]]
    as_text = _csv_convert_options(header, parsed, fmt, pa.string())
    as_bytes = _csv_convert_options(header, parsed, fmt, pa.binary())

    def parse(chunk: Chunk) -> pa.Table:
        try:
            return read_rows(chunk, header, as_text)
        except pa.ArrowInvalid as exc:
            if "invalid UTF8" not in str(exc):
                raise
        return read_rows(chunk, header, as_bytes)  # values that are not UTF-8 are NULLed below

    seen: dict[str, JsonSeen] = {}
    try:
        for raw in parse_rows(itertools.chain([first[header_end:]], chunks), parse, header[-1], start=header_end):
            text, failures = _utf8_text(raw.select(wanted))
            yield _convert_block(text, columns, fmt, seen, failures)
    except (MalformedRows, RowTooLarge) as exc:  # library text can echo row content: scrub it
        raise BadBatchFile(path, f"malformed content {scrub(str(exc))}") from None


def _csv_convert_options(header: list[str], parsed: list[str], fmt: FileFormat,
                         text_type: pa.DataType) -> pacsv.ConvertOptions:
    return pacsv.ConvertOptions(column_types={name: text_type for name in header}, include_columns=parsed,
                                null_values=[fmt.null_string] if fmt.null_string else [],
                                strings_can_be_null=True, quoted_strings_can_be_null=False)


def _utf8_text(raw: pa.Table) -> tuple[pa.Table, list[Failure]]:
    """Columns read as binary (their chunk held bytes that are not UTF-8) as text: those values become NULL with a
    failure each."""
    failures: list[Failure] = []
    for index, name in enumerate(raw.column_names):
        if pa.types.is_binary(raw.schema.field(index).type):
            text, bad_rows = _utf8_or_null(raw.column(name).combine_chunks())
            raw = raw.set_column(index, name, text)
            failures.extend(Failure(row, name, NULLED, SERIALIZATION_ERROR) for row in bad_rows)
    return raw, failures


_STRING = pa.string()


def _utf8_or_null(values: pa.Array, text_type: pa.DataType = _STRING) -> tuple[pa.Array, list[int]]:
    """Binary values as text; those that are not valid UTF-8 become NULL (their rows are returned)."""
    try:
        return values.cast(text_type), []
    except pa.ArrowInvalid:
        pass
    bad_rows = [row for row, value in enumerate(values.to_pylist()) if value is not None and not _is_utf8(value)]
    keep = np.ones(len(values), dtype=bool)
    keep[bad_rows] = False
    return pc.if_else(pa.array(keep), values, pa.scalar(None, values.type)).cast(text_type), bad_rows


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _iter_parquet(path: str, stream: BinaryIO, columns: list[ColumnDef], fmt: FileFormat,
                  required: list[str]) -> Iterator[DecodedBatch]:
    # Parquet needs random access: the plaintext is held in memory (never written to disk).
    data = arrow_owned(stream.read())  # (Python's bytes freed at once: the file is held once)
    try:
        pfile = pq.ParquetFile(pa.BufferReader(data))
    except pa.ArrowInvalid as exc:
        raise BadBatchFile(path, f"not a readable Parquet file: {scrub(str(exc))}") from None
    present = pfile.schema_arrow.names
    _check_columns(path, present, columns, required)
    wanted = [c.name for c in columns if c.name in present]
    seen: dict[str, JsonSeen] = {}
    for batch in pfile.iter_batches(batch_size=256_000, columns=wanted):
        raw, failures = _valid_utf8(pa.Table.from_batches([batch]))
        yield _convert_block(raw, columns, fmt, seen, failures)


def _valid_utf8(raw: pa.Table) -> tuple[pa.Table, list[Failure]]:
    """Parquet string columns are not checked by the reader: a value that is not UTF-8 becomes NULL with a failure
    (stored as it is, it would break every reader of the table)."""
    failures: list[Failure] = []
    for index, name in enumerate(raw.column_names):
        values = raw.column(name).combine_chunks()
        if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
            continue
        try:
            values.validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        large = pa.types.is_large_string(values.type)
        text, bad_rows = _utf8_or_null(values.view(pa.large_binary() if large else pa.binary()), values.type)
        raw = raw.set_column(index, name, text)
        failures.extend(Failure(row, name, NULLED, SERIALIZATION_ERROR) for row in bad_rows)
    return raw, failures


def _convert_block(raw: pa.Table, columns: list[ColumnDef], fmt: FileFormat, json_seen: dict[str, JsonSeen],
                   failures: list[Failure] | None = None) -> DecodedBatch:
    arrays: list[pa.Array] = []
    names: list[str] = []
    unmodified: dict[str, pa.Array] = {}
    failures = list(failures or [])
    for col in columns:
        if col.name not in raw.column_names:
            continue
        values = raw.column(col.name).combine_chunks()
        if _is_text_or_bytes(values.type):
            if fmt.unmodified_string:
                mask = _equals(values, fmt.unmodified_string)
                if mask is not None:
                    unmodified[col.name] = mask
                    values = pc.if_else(mask, pa.scalar(None, values.type), values)
            if fmt.kind == "parquet" and fmt.null_string:
                mask = _equals(values, fmt.null_string)
                if mask is not None:
                    values = pc.if_else(mask, pa.scalar(None, values.type), values)
        typed, col_failures = convert_column(values, col, json_seen.setdefault(col.name, {}))
        arrays.append(typed)
        names.append(col.name)
        failures.extend(col_failures)
    return DecodedBatch(pa.Table.from_arrays(arrays, names=names), unmodified, failures)


def _is_text_or_bytes(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _equals(values: pa.Array, marker: str) -> pa.Array | None:
    """Where a text or binary column holds a marker (Parquet binary columns carry it as bytes); None where it
    holds it nowhere. Values of another length cannot be the marker: the lengths, read from the offsets
    buffer, rule out almost every column without comparing a single value."""
    raw = marker.encode()
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64 if pa.types.is_large_string(values.type)
                            or pa.types.is_large_binary(values.type) else np.int32)
    offsets = offsets[values.offset:values.offset + len(values) + 1]
    if not np.any(np.diff(offsets) == len(raw)):
        return None
    binary = pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)
    mask = pc.fill_null(pc.equal(values, pa.scalar(raw if binary else marker, values.type)), False)
    return mask if pc.any(mask).as_py() else None
