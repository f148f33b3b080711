"""Change events in Arcion's layouts (seed: Arcion S3 file format; output-formats.md §3).

Realtime rows: x triplets (new, old, exists) in alphabetical column order (as the seed's
example), then `opType`, `cursor`, `operationcount`. Exists: 0 neither image, 1 new, 2 old,
3 both. FULL images (our default) put every column in the images the operation has;
MINIMAL images follow the seed's realtime examples: an update has the columns whose value
changed in New and the other key columns in Old, a delete only its key in Old.

CSV: RFC 4180 with minimal quoting, LF line ends; NULL (and an absent value) is the null
token unquoted, and a string equal to the token is always quoted, so the two stay apart.
JSON Lines: every value a string; an absent value is the string "null" (as in the seed),
a NULL that is present in an image is JSON null, so text "null" replays exactly.

Snapshot rows (a version that rewrote the whole table): the x columns in table order (CSV),
or one object of column → value per row (JSON), as the seed's snapshot mode.

CSV fields are built per column with pyarrow compute; BINARY (base64) and JSON objects go
value by value.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.changes.events import EVENT_DELETE, EVENT_INSERT, EVENT_UPDATE, ChangeEvents, equal_rows
from destination.model.table_model import ColumnDef

DEFAULT_NULL_TOKEN = "NULL"
NEITHER, NEW, OLD, BOTH = 0, 1, 2, 3
_NEEDS_QUOTES = r'[,"\r\n]'


@dataclass
class RealtimeRows:
    """Events with their images as Arcion shows them, ready to format."""

    op: pa.Array  # "I" | "U" | "D"
    before: pa.Table  # Old images (NULL where absent)
    after: pa.Table  # New images (NULL where absent)
    exists: pa.Table  # int8 per column
    cursor: pa.Array  # JSON text per event
    operationcount: pa.Array  # JSON text per event

    @property
    def count(self) -> int:
        return len(self.op)


def full_exists(op: pa.Array, names: list[str]) -> pa.Table:
    """FULL images: every column is in New for an insert, Old for a delete, both for an update."""
    code = pc.if_else(pc.equal(op, EVENT_INSERT), NEW,
                      pc.if_else(pc.equal(op, EVENT_DELETE), OLD, BOTH)).cast(pa.int8())
    return pa.table({name: code for name in names})


def minimal_images(op: pa.Array, before: pa.Table, after: pa.Table, modified: dict[str, pa.Array],
                   keys: list[str]) -> tuple[pa.Table, pa.Table, pa.Table]:
    """MINIMAL images, the seed's realtime style: an insert has every column in New; an update has its
    modified columns in New and its other key columns in Old; a delete has only its key in Old.
    Returns (before, after, exists)."""
    n = len(op)
    none = pa.array(np.zeros(n, dtype=bool))
    is_insert, is_update = pc.equal(op, EVENT_INSERT), pc.equal(op, EVENT_UPDATE)
    old_cols, new_cols, codes = {}, {}, {}
    for name in after.column_names:
        in_new = pc.or_(is_insert, pc.and_(is_update, modified.get(name, none)))
        in_old = pc.and_(pc.invert(is_insert), pc.invert(in_new)) if name in keys else none
        new_cols[name] = pc.if_else(in_new, after.column(name), pa.nulls(n, after.schema.field(name).type))
        old_cols[name] = pc.if_else(in_old, before.column(name), pa.nulls(n, before.schema.field(name).type))
        codes[name] = pc.add(pc.if_else(in_new, NEW, NEITHER), pc.if_else(in_old, OLD, NEITHER)).cast(pa.int8())
    return pa.table(old_cols), pa.table(new_cols), pa.table(codes)


def realtime_rows(events: ChangeEvents, keys: list[str], minimal: bool, cursor: pa.Array,
                  operationcount: pa.Array) -> RealtimeRows:
    """Images and exists codes of `events`; in MINIMAL mode a column counts as modified when its value changed."""
    names = events.after.column_names
    if not minimal:
        return RealtimeRows(events.op, events.before, events.after, full_exists(events.op, names), cursor, operationcount)
    modified = {name: pa.array(~equal_rows(events.before.select([name]), events.after.select([name])))
                for name in names}
    old, new, exists = minimal_images(events.op, events.before, events.after, modified, keys)
    return RealtimeRows(events.op, old, new, exists, cursor, operationcount)


def value_text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
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


def csv_text(names: list[str]) -> str:
    return ",".join(_csv_field(pa.array(names, pa.string()), "").to_pylist())


def realtime_header(columns: list[ColumnDef]) -> list[str]:
    names = sorted(c.name for c in columns)
    return [f"{n}__{part}" for n in names for part in ("new", "old", "exists")] + ["opType", "cursor", "operationcount"]


def _lines(fields: list[pa.Array], header: list[str] | None, count: int) -> bytes:
    head = csv_text(header) + "\n" if header is not None else ""
    if not count:
        return head.encode("utf-8")
    lines = pc.binary_join_element_wise(*fields, ",")
    return (head + "\n".join(lines.to_pylist()) + "\n").encode("utf-8")


def realtime_csv(rows: RealtimeRows, columns: list[ColumnDef], null_token: str = DEFAULT_NULL_TOKEN,
                 header: bool = False) -> bytes:
    """Realtime CSV lines (LF line ends), optionally after a header row."""
    fields: list[pa.Array] = []
    for col in sorted(columns, key=lambda c: c.name):
        fields.append(_csv_field(value_text(rows.after.column(col.name)), null_token))
        fields.append(_csv_field(value_text(rows.before.column(col.name)), null_token))
        fields.append(rows.exists.column(col.name).combine_chunks().cast(pa.string()))
    fields += [rows.op, _csv_field(rows.cursor, null_token), _csv_field(rows.operationcount, null_token)]
    return _lines(fields, realtime_header(columns) if header else None, rows.count)


def snapshot_csv(table: pa.Table, columns: list[ColumnDef], null_token: str = DEFAULT_NULL_TOKEN,
                 header: bool = False) -> bytes:
    """Snapshot CSV: the x columns in table order."""
    fields = [_csv_field(value_text(table.column(c.name)), null_token) for c in columns]
    return _lines(fields, [c.name for c in columns] if header else None, table.num_rows)


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


def _image(texts: dict[str, list[str | None]], present: dict[str, list[bool]], i: int) -> dict[str, str | None]:
    return {n: (t[i] if present[n][i] else "null") for n, t in texts.items()}


def realtime_json(rows: RealtimeRows, columns: list[ColumnDef], schema: str, table: str) -> bytes:
    """Realtime JSON Lines: values as strings; "null" where the image lacks the column, JSON null for a NULL in it."""
    name = table_name(schema, table)
    names = [c.name for c in columns]
    old = {n: value_text(rows.before.column(n)).to_pylist() for n in names}
    new = {n: value_text(rows.after.column(n)).to_pylist() for n in names}
    codes = {n: rows.exists.column(n).to_numpy() for n in names}
    in_old = {n: ((codes[n] & OLD) != 0).tolist() for n in names}
    in_new = {n: ((codes[n] & NEW) != 0).tolist() for n in names}
    exists = {n: codes[n].astype(str).tolist() for n in names}
    ops, cursors, counts = rows.op.to_pylist(), rows.cursor.to_pylist(), rows.operationcount.to_pylist()
    lines = [json.dumps({"tableName": name, "opType": ops[i], "cursor": cursors[i], "before": _image(old, in_old, i),
                         "after": _image(new, in_new, i), "exists": {n: exists[n][i] for n in names},
                         "operationcount": counts[i]}, separators=(",", ":"), ensure_ascii=False)
             for i in range(rows.count)]
    return ("\n".join(lines) + ("\n" if lines else "")).encode("utf-8")


def snapshot_json(table: pa.Table, columns: list[ColumnDef]) -> bytes:
    """Snapshot JSON Lines: one object per row, values as strings, NULL as JSON null."""
    texts = {c.name: value_text(table.column(c.name)).to_pylist() for c in columns}
    lines = [json.dumps({n: t[i] for n, t in texts.items()}, separators=(",", ":"), ensure_ascii=False)
             for i in range(table.num_rows)]
    return ("\n".join(lines) + ("\n" if lines else "")).encode("utf-8")
