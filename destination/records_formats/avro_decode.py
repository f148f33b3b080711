"""The fast reader of the Avro codec's data files: polars' Avro reader (Rust, whole blocks at a time) decodes the
file's primitive values, and Arrow gives them the logical types, value for value as fastavro's logical types do.

polars refuses decimals of more than 16 bytes and reads the logical types through its own types, so the reader
is given the file with its schema's logical types left out (the values' bytes are unchanged: a logical type does
not change the encoding; the blocks inflated beforehand) and reads plain ints, longs and bytes; the columns are
then typed here:

| Avro (as the codec writes it)    | from polars' column            | to the table's Arrow type                   |
|----------------------------------|--------------------------------|---------------------------------------------|
| int (SHORT, INT)                 | int32                          | int16 / int32, checked cast                 |
| int date                         | int32 days since 1970-01-01    | date32 (the same days)                      |
| long time-micros                 | int64 microseconds of the day  | time64[us]; a value outside the day: None   |
| long timestamp-micros (or local-)| int64 microseconds since epoch | timestamp[us], naive or UTC as the table's  |
| bytes decimal(p,s)               | big-endian two's complement    | decimal128/256(p,s) of the same unscaled    |
| bytes / string                   | large binary / large string    | binary / string                             |

`read` answers None when the file is not one this reader can type exactly (another writer schema, a codec
polars lacks, a decimal not written full width, a value beyond its precision or a time beyond the day) or is
damaged (a block that does not end with the header's sync marker, which polars does not check): the caller then
reads it through fastavro, whose answer (values or a clear error) is the reference.
"""
from __future__ import annotations

import io
import json
import os
from typing import Any, cast

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from isal import isal_zlib

from destination.records_formats.avro_container import SYNC_BYTES, blocks, container, header
from destination.runtime.pools import shared_pool

_CODECS = (b"null", b"deflate")
_DAY_MICROS = 86_400_000_000
_INFLATE_ERROR = cast(type[Exception], isal_zlib.error)  # its stub declares an instance


def _plain_file(raw: bytes, meta: dict[str, bytes], sync_at: int, schema: dict[str, Any]) -> bytes:
    """The same file with its schema's logical types left out and its blocks inflated (ISA-L inflates them in
    threads, in a third of the time the reader takes to)."""
    fields = [{**f, "type": ["null", b["type"] if isinstance(b := f["type"][1], dict) else b]} for f in schema["fields"]]
    plain = {**meta, "avro.schema": json.dumps({**schema, "fields": fields}).encode("utf-8"), "avro.codec": b"null"}
    sync = raw[sync_at:sync_at + SYNC_BYTES]
    found = blocks(raw, sync_at)
    if meta.get("avro.codec", b"null") == b"null":
        return container(plain, sync, ((count, raw[start:end]) for count, start, end in found))

    def inflate(block: tuple[int, int, int]) -> bytes:
        return isal_zlib.decompress(raw[block[1]:block[2]], -15)

    pool = shared_pool("avro-blocks", os.cpu_count() or 1)
    return container(plain, sync, ((count, data) for (count, _, _), data
                                   in zip(found, pool.map(inflate, found), strict=True)))


def _decimal(arr: pa.Array, target: pa.DataType) -> pa.Array | None:
    width = 16 if pa.types.is_decimal128(target) else 32
    filled = pc.fill_null(arr, pa.scalar(bytes(width), arr.type))
    lengths = pc.binary_length(filled)
    if len(arr) and (pc.min(lengths).as_py() != width or pc.max(lengths).as_py() != width):
        return None  # the codec writes every decimal full width; a shorter encoding is fastavro's to read
    offsets = np.frombuffer(filled.buffers()[1], np.int64)[filled.offset:filled.offset + len(filled) + 1]
    big = np.frombuffer(filled.buffers()[2], np.uint8)[offsets[0]:offsets[-1]].reshape(-1, width)
    little = np.ascontiguousarray(big[:, ::-1])
    validity = arr.is_valid().buffers()[1] if arr.null_count else None  # a bitmap from offset 0, as `little`
    result = pa.Array.from_buffers(target, len(arr), [validity, pa.py_buffer(little.tobytes())], arr.null_count)
    try:
        result.validate(full=True)  # a value beyond the precision: fastavro's Decimal, then Arrow's refusal
    except pa.ArrowInvalid:
        return None
    return result


def _typed(arr: pa.Array, avro_type: Any, target: pa.DataType) -> pa.Array | None:
    logical = avro_type.get("logicalType") if isinstance(avro_type, dict) else None
    if logical == "decimal":
        return _decimal(arr, target)
    if logical == "time-micros":
        low, high = pc.min(arr).as_py(), pc.max(arr).as_py()
        if low is not None and (low < 0 or high >= _DAY_MICROS):
            return None
    if logical is not None:  # date, time-micros, (local-)timestamp-micros: the same integer, Arrow's unit
        return arr.view(target)
    return arr.cast(target)  # checked: an int beyond SHORT raises


_TIMESTAMPS = ("timestamp-micros", "local-timestamp-micros")


def _typed_fields(schema: dict[str, Any]) -> list[Any] | None:
    """The schema's fields as they decide the values: without `field-id`, and the timestamps without
    `adjust-to-utc`, `local-timestamp-micros` as `timestamp-micros` (files written before field ids and Iceberg's
    timestamp typing: the same bytes; the table's Arrow type says whether a timestamp is in UTC)."""
    fields = schema.get("fields")
    if not isinstance(fields, list):
        return None
    out: list[Any] = []
    for f in fields:
        if isinstance(f, dict):
            f = {k: v for k, v in f.items() if k != "field-id"}
            kind = f.get("type")
            if isinstance(kind, list) and len(kind) == 2 and isinstance(kind[1], dict) \
                    and kind[1].get("logicalType") in _TIMESTAMPS:
                f["type"] = [kind[0], {**{k: v for k, v in kind[1].items() if k != "adjust-to-utc"},
                                       "logicalType": "timestamp-micros"}]
        out.append(f)
    return out


def read(raw: bytes, expected: dict[str, Any], target: pa.Schema) -> pa.Table | None:
    """The file's rows in `target`'s types, or None when only fastavro can read them exactly (see above).
    `expected` is the codec's writer schema for the table: the file's must be it, field for field."""
    try:
        meta, sync_at = header(raw)
        writer_schema = json.loads(meta["avro.schema"])
    except (ValueError, IndexError, KeyError):
        return None  # fastavro names what is wrong with the file
    if meta.get("avro.codec", b"null") not in _CODECS or _typed_fields(writer_schema) != _typed_fields(expected):
        return None
    if len(raw) == sync_at + SYNC_BYTES:  # no block: polars refuses a file without one
        return target.empty_table()
    try:
        frame = pl.read_avro(io.BytesIO(_plain_file(raw, meta, sync_at, writer_schema)))
    except (pl.exceptions.PolarsError, OSError, ValueError, IndexError, _INFLATE_ERROR):
        return None  # a damaged file: fastavro's error names the cause
    if frame.columns != target.names:
        return None
    plain = frame.to_arrow()
    arrays = []
    for f, spec in zip(target, writer_schema["fields"], strict=True):
        try:
            typed = _typed(plain.column(f.name).combine_chunks(), spec["type"][1], f.type)
        except pa.ArrowInvalid:  # e.g. an int beyond SHORT: fastavro's values meet the same refusal
            typed = None
        if typed is None:
            return None
        arrays.append(typed)
    return pa.Table.from_arrays(arrays, schema=target)
