"""Change events in Arcion's realtime layouts (seed: Arcion S3 file format; output-formats.md §3).

Events arrive as Arrow: an `op` array (I/U/D), before and after images (the table's columns,
NULL where absent), an `exists` code per column (0 neither, 1 new, 2 old, 3 both), and the
cursor and operationcount JSON texts. CSV lines are built per column with pyarrow compute
(only BINARY, for base64, goes value by value); JSON builds one dict per event.

CSV: x triplets (new, old, exists) in alphabetical column order (as the seed's example), then
`opType`, `cursor`, `operationcount`; RFC 4180 with minimal quoting; NULL is the null token
unquoted, and a string equal to the token is always quoted, so the two stay apart.
JSON: one object per line; every value a string, NULL the string "null" (as the seed).
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from destination.table_model import ColumnDef

DEFAULT_NULL_TOKEN = "NULL"
INSERT, UPDATE, DELETE = "I", "U", "D"
NEITHER, NEW, OLD, BOTH = 0, 1, 2, 3
_NEEDS_QUOTES = r'[,"\r\n]'


@dataclass
class ChangeEvents:
    op: pa.Array  # "I" | "U" | "D" per event
    before: pa.Table  # prior image: the table's columns, NULL where absent
    after: pa.Table  # new image
    exists: pa.Table  # int8 per column: NEITHER, NEW, OLD or BOTH
    cursor: pa.Array  # JSON text per event
    operationcount: pa.Array  # JSON text per event

    @property
    def count(self) -> int:
        return len(self.op)


def full_exists(op: pa.Array, names: list[str]) -> pa.Table:
    """FULL images (our default): every column is in New for an insert, Old for a delete, both for an update."""
    code = pc.if_else(pc.equal(op, INSERT), NEW, pc.if_else(pc.equal(op, DELETE), OLD, BOTH)).cast(pa.int8())
    return pa.table({name: code for name in names})


def minimal_images(op: pa.Array, before: pa.Table, after: pa.Table, modified: dict[str, pa.Array],
                   keys: list[str]) -> tuple[pa.Table, pa.Table, pa.Table]:
    """MINIMAL images, the seed's realtime style: an insert has every column in New; an update has its
    modified columns in New and its other key columns in Old; a delete has only its key in Old.
    Returns (before, after, exists)."""
    n = len(op)
    is_insert, is_update = pc.equal(op, INSERT), pc.equal(op, UPDATE)
    old_cols, new_cols, codes = {}, {}, {}
    for name in after.column_names:
        in_new = pc.or_(is_insert, pc.and_(is_update, modified.get(name, pa.array([False] * n))))
        in_old = pc.and_(pc.invert(is_insert), pc.invert(in_new)) if name in keys else pa.array([False] * n)
        new_cols[name] = pc.if_else(in_new, after.column(name), pa.nulls(n, after.schema.field(name).type))
        old_cols[name] = pc.if_else(in_old, before.column(name), pa.nulls(n, before.schema.field(name).type))
        codes[name] = pc.add(pc.if_else(in_new, NEW, NEITHER), pc.if_else(in_old, OLD, NEITHER)).cast(pa.int8())
    return pa.table(old_cols), pa.table(new_cols), pa.table(codes)


def value_text(values: pa.Array | pa.ChunkedArray, col: ColumnDef) -> pa.Array:
    """A value as text a consumer can parse back exactly: ISO-8601 times with microseconds (`Z` for UTC),
    shortest round-trip floats, decimals at their scale, BINARY as base64, booleans true/false."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    t = values.type
    if pa.types.is_timestamp(t):
        return pc.strftime(values, format="%Y-%m-%dT%H:%M:%SZ" if t.tz else "%Y-%m-%dT%H:%M:%S")
    if pa.types.is_binary(t):
        return pa.array([None if v is None else base64.b64encode(v).decode() for v in values.to_pylist()], pa.string())
    return values.cast(pa.string())


def _csv_field(text: pa.Array, null_token: str) -> pa.Array:
    needs = pc.or_(pc.match_substring_regex(text, _NEEDS_QUOTES), pc.equal(text, null_token))
    quoted = pc.binary_join_element_wise('"', pc.replace_substring(text, '"', '""'), '"', "")
    return pc.fill_null(pc.if_else(needs, quoted, text), null_token)


def csv_header(columns: list[ColumnDef]) -> str:
    names = sorted(c.name for c in columns)
    return ",".join([f"{n}__{part}" for n in names for part in ("new", "old", "exists")]
                    + ["opType", "cursor", "operationcount"])


def arcion_csv(events: ChangeEvents, columns: list[ColumnDef], null_token: str = DEFAULT_NULL_TOKEN,
               header: bool = False) -> bytes:
    """The events as Arcion realtime CSV lines (LF line ends), optionally after a header row."""
    fields: list[pa.Array] = []
    for col in sorted(columns, key=lambda c: c.name):
        fields.append(_csv_field(value_text(events.after.column(col.name), col), null_token))
        fields.append(_csv_field(value_text(events.before.column(col.name), col), null_token))
        fields.append(events.exists.column(col.name).combine_chunks().cast(pa.string()))
    fields.append(events.op)
    fields.append(_csv_field(events.cursor, null_token))
    fields.append(_csv_field(events.operationcount, null_token))
    lines = pc.binary_join_element_wise(*fields, ",")
    body = "\n".join(lines.to_pylist())
    head = csv_header(columns) + "\n" if header else ""
    return (head + body + ("\n" if events.count else "")).encode("utf-8")


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, 32-bit signed)."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def java_objects_hash(*values: str | int | None) -> int:
    """Java's Objects.hash: 31 * result + element hash, starting at 1; null counts 0; Integer hashes to itself."""
    h = 1
    for v in values:
        part = 0 if v is None else (v if isinstance(v, int) else java_string_hash(v))
        h = (31 * h + part) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def table_name(schema: str, table: str) -> dict[str, object]:
    namespace_hash = java_objects_hash(None, schema)
    return {"namespace": {"catalog": None, "schema": schema, "hash": namespace_hash},
            "name": table, "hash": java_objects_hash(namespace_hash, table)}


def arcion_json(events: ChangeEvents, columns: list[ColumnDef], schema: str, table: str) -> bytes:
    """The events as Arcion realtime JSON Lines (values as strings, NULL as "null")."""
    name = table_name(schema, table)
    texts = {c.name: (value_text(events.before.column(c.name), c).to_pylist(),
                      value_text(events.after.column(c.name), c).to_pylist(),
                      events.exists.column(c.name).to_pylist()) for c in columns}
    ops, cursors, counts = events.op.to_pylist(), events.cursor.to_pylist(), events.operationcount.to_pylist()
    lines = []
    for i in range(events.count):
        lines.append(json.dumps({
            "tableName": name, "opType": ops[i], "cursor": cursors[i],
            "before": {n: "null" if t[0][i] is None else t[0][i] for n, t in texts.items()},
            "after": {n: "null" if t[1][i] is None else t[1][i] for n, t in texts.items()},
            "exists": {n: str(t[2][i]) for n, t in texts.items()},
            "operationcount": counts[i],
        }, separators=(",", ":"), ensure_ascii=False))
    return ("\n".join(lines) + ("\n" if lines else "")).encode("utf-8")
