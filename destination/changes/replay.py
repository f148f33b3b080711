"""Reading a table's change directories back as typed events, and replaying them (the `changes` command).

Each committed version with change files has `changes/v<N>/`; its `_changes.json` gives the
format, the kind (row events or a snapshot) and the table definition whose types the Arcion
text is parsed with (by the write path's own converters). Files are read in `_manifest` order.
"""
from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from destination.batch_files.csvrows import Chunk, first_row_end, iter_row_chunks, parse_rows, read_rows
from destination.batch_files.reader import CSV_BLOCK
from destination.changes import cdf
from destination.changes.arcion import BOTH, NEW, OLD, realtime_header
from destination.changes.change_settings import ARCION_CSV, PARQUET
from destination.changes.events import (
    EVENT_DELETE,
    EVENT_INSERT,
    EVENT_SNAPSHOT,
    EVENT_UPDATE,
    ChangeEvents,
    concat_events,
    data_schema,
)
from destination.changes.metadata import CHANGES_JSON, KIND_ROWS
from destination.model.conversion import convert_column
from destination.model.keys import key_tokens
from destination.model.table_model import TableDef
from destination.on_disk import layout, records
from destination.runtime.arrow_memory import arrow_owned
from destination.runtime.errors import DestinationError
from destination.storage.base import Storage


@dataclass
class VersionChanges:
    version: int
    kind: str  # metadata.ROWS or metadata.SNAPSHOT
    table: TableDef
    timestamp_us: int
    events: ChangeEvents  # a snapshot: one EVENT_SNAPSHOT event per row, its row as the after image
    exists: pa.Table | None  # Arcion exists codes per event (None: full images, as Parquet has)


class MissingChanges(DestinationError):
    """A version in the requested range has no change directory."""


@dataclass
class VersionChangeFiles:
    """A version's change directory, its files read one at a time (`events()`), in manifest order."""

    storage: Storage
    directory: str
    about: dict[str, Any]  # `_changes.json`
    names: list[str]

    @property
    def kind(self) -> str:
        return str(self.about["kind"])

    @property
    def table(self) -> TableDef:
        return TableDef.from_json(self.about["definition"])

    def events(self) -> Iterator[tuple[ChangeEvents, pa.Table | None]]:
        table = self.table
        for name in self.names:
            yield _read_file(self.storage, f"{self.directory}/{name}", self.about, table)


def version_files(storage: Storage, prefix: str, version: int) -> VersionChangeFiles:
    directory = layout.changes_dir(prefix, version)
    try:
        about = json.loads(storage.read_bytes(f"{directory}/{CHANGES_JSON}"))
        manifest = json.loads(storage.read_bytes(f"{directory}/{records.MANIFEST}"))
    except FileNotFoundError:
        raise MissingChanges(f"version {version} has no change files (they were off when it was written)") from None
    return VersionChangeFiles(storage, directory, about, [e["url"].rsplit("/", 1)[-1] for e in manifest["entries"]])


def read_version(storage: Storage, prefix: str, version: int) -> VersionChanges:
    files = version_files(storage, prefix, version)
    table = files.table
    parts = list(files.events())
    events = concat_events([p[0] for p in parts], table)
    exists = [p[1] for p in parts if p[1] is not None and p[1].num_rows]
    return VersionChanges(version, files.kind, table, int(files.about["commit_timestamp_us"]), events,
                          pa.concat_tables(exists) if exists else None)


def _read_file(storage: Storage, path: str, about: dict[str, Any], table: TableDef) -> tuple[ChangeEvents, pa.Table | None]:
    data = storage.read_bytes(path)
    if about["format"] == PARQUET:
        return _from_cdf(pq.read_table(pa.BufferReader(arrow_owned(data))), table), None
    if about["format"] == ARCION_CSV:
        texts = _csv_texts(data, about, table)
    else:
        texts = _json_texts(data, about["kind"], table)
    return _typed(texts, about["kind"], table)


def _from_cdf(rows: pa.Table, table: TableDef) -> ChangeEvents:
    kind = rows.column(cdf.CHANGE_TYPE).to_numpy(zero_copy_only=False)
    images = rows.select(data_schema(table).names)
    # an update is a preimage row followed by its postimage row
    first = kind != cdf.CHANGE_TYPE_POSTIMAGE
    op = np.select([kind == cdf.CHANGE_TYPE_INSERT, kind == cdf.CHANGE_TYPE_PREIMAGE, kind == cdf.CHANGE_TYPE_DELETE],
                   [EVENT_INSERT, EVENT_UPDATE, EVENT_DELETE], EVENT_SNAPSHOT)[first]
    at = np.flatnonzero(first)
    has_before = np.isin(op, [EVENT_UPDATE, EVENT_DELETE])
    before_idx = np.where(has_before, at, -1)
    after_idx = np.where(op == EVENT_UPDATE, at + 1, np.where(has_before, -1, at))
    def take(idx: np.ndarray) -> pa.Table:
        return images.take(pa.array(idx, pa.int64(), mask=idx < 0))
    return ChangeEvents(pa.array(op, pa.string()), take(before_idx), take(after_idx))


def _csv_texts(data: bytes, about: dict[str, Any], table: TableDef) -> dict[str, pa.Array]:
    columns = list(table.columns)
    names = realtime_header(columns) if about["kind"] == KIND_ROWS else [c.name for c in columns]
    if not data.strip():
        return {n: pa.array([], pa.string()) for n in names}
    # the null token only counts unquoted: a quoted one is text
    convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, strings_can_be_null=True,
                                   null_values=[about["null_token"]], quoted_strings_can_be_null=False)
    # cut between rows and parsed a chunk at a time, so no reader buffer boundary falls inside a value
    chunks: Iterator[Chunk] = iter_row_chunks(io.BytesIO(data), CSV_BLOCK)
    start = 0
    if about["include_header"]:
        first = next(chunks, b"")
        start = first_row_end(first)
        chunks = itertools.chain([first[start:]], chunks)
    parsed = pa.concat_tables([*parse_rows(chunks, lambda chunk: read_rows(chunk, names, convert), names[-1], start),
                               pa.table({n: pa.array([], pa.string()) for n in names})])
    return {n: parsed.column(n).combine_chunks() for n in names}


def _json_texts(data: bytes, kind: str, table: TableDef) -> dict[str, pa.Array]:
    # split on LF only: str.splitlines would also split at U+2028, U+2029 and U+0085, which values hold unescaped
    lines = [json.loads(line) for line in data.split(b"\n") if line.strip()]
    names = [c.name for c in table.columns]
    if kind != KIND_ROWS:
        return {n: pa.array([row.get(n) for row in lines], pa.string()) for n in names}
    out: dict[str, pa.Array] = {"opType": pa.array([e["opType"] for e in lines], pa.string())}
    for n in names:
        codes = [int(e["exists"][n]) for e in lines]
        out[f"{n}__exists"] = pa.array([str(c) for c in codes], pa.string())
        out[f"{n}__new"] = pa.array([e["after"][n] if c & NEW else None for e, c in zip(lines, codes, strict=True)], pa.string())
        out[f"{n}__old"] = pa.array([e["before"][n] if c & OLD else None for e, c in zip(lines, codes, strict=True)],
                                    pa.string())
    return out


def _convert(text: pa.Array, table: TableDef, name: str) -> pa.Array:
    column = table.column(name)
    assert column is not None
    typed, failures = convert_column(text, column)
    if failures:
        raise DestinationError(f"change file value of column {name!r} does not parse as {column.ddl()}")
    return typed


def _typed(texts: dict[str, pa.Array], kind: str, table: TableDef) -> tuple[ChangeEvents, pa.Table | None]:
    names = [c.name for c in table.columns]
    schema = data_schema(table)
    if kind != KIND_ROWS:
        rows = pa.Table.from_arrays([_convert(texts[n], table, n) for n in names], schema=schema)
        return ChangeEvents(pa.array([EVENT_SNAPSHOT] * rows.num_rows, pa.string()),
                            pa.Table.from_arrays([pa.nulls(rows.num_rows, f.type) for f in schema], schema=schema),
                            rows), None
    before = pa.Table.from_arrays([_convert(texts[f"{n}__old"], table, n) for n in names], schema=schema)
    after = pa.Table.from_arrays([_convert(texts[f"{n}__new"], table, n) for n in names], schema=schema)
    exists = pa.table({n: texts[f"{n}__exists"].cast(pa.int8()) for n in names})
    op = texts["opType"]
    for name in table.key_columns:  # minimal images hold an update's key in Old only; an update keeps its key
        keep_old = pc.and_(pc.equal(op, EVENT_UPDATE), pc.equal(exists.column(name), OLD))
        i = after.column_names.index(name)
        after = after.set_column(i, name, pc.if_else(keep_old, before.column(name), after.column(name)))
    return ChangeEvents(op, before, after), exists


# ---- replay ------------------------------------------------------------------------------------

Row = dict[str, Any]


def _keys(table: pa.Table, definition: TableDef) -> list[str]:
    key = [c for c in definition.columns if c.name in definition.key_columns]
    return key_tokens(table, key).to_pylist() if table.num_rows else []


def apply(state: dict[str, Row], changes: VersionChanges) -> set[str]:
    """Apply one version's changes to `state` (rows by key token); returns the keys they touched.
    A snapshot replaces every row. An update sets the columns its New image holds (all, for full images)."""
    events, table = changes.events, changes.table
    ops = events.op.to_pylist()
    if changes.kind != KIND_ROWS:
        state.clear()
        state.update(zip(_keys(events.after, table), events.after.to_pylist(), strict=True))
        return set(state)
    before_keys, after_keys = _keys(events.before, table), _keys(events.after, table)
    afters = events.after.to_pylist()
    exists = changes.exists.to_pylist() if changes.exists is not None else [None] * len(ops)
    touched: set[str] = set()
    for i, op in enumerate(ops):
        key = after_keys[i] if op == EVENT_INSERT else before_keys[i]  # minimal images carry the key in Old only
        touched.add(key)
        if op == EVENT_INSERT:
            state[key] = afters[i]
        elif op == EVENT_DELETE:
            state.pop(key, None)
        else:
            row = dict(state.get(key, afters[i]))
            codes = exists[i]
            row.update({n: v for n, v in afters[i].items() if codes is None or codes[n] & NEW})
            state[key] = row
    return touched


def net_events(start: dict[str, Row], end: dict[str, Row], keys: set[str], table: TableDef) -> ChangeEvents:
    """One event per key whose row differs between two states: I (absent at the start), D (absent at the end),
    U (both, with the start's row as before image and the end's as after image)."""
    schema = data_schema(table)
    ops: list[str] = []
    before: list[Row | None] = []
    after: list[Row | None] = []
    for key in sorted(keys):
        a, b = start.get(key), end.get(key)
        if a == b:
            continue
        ops.append(EVENT_INSERT if a is None else EVENT_DELETE if b is None else EVENT_UPDATE)
        before.append(a)
        after.append(b)
    empty = {n: None for n in schema.names}
    return ChangeEvents(pa.array(ops, pa.string()),
                        pa.Table.from_pylist([r or empty for r in before], schema=schema),
                        pa.Table.from_pylist([r or empty for r in after], schema=schema))


def is_full(changes: VersionChanges) -> bool:
    """Every event carries whole images (Parquet, or Arcion with full images)."""
    if changes.exists is None or not changes.exists.num_rows:
        return True
    ops = changes.events.op
    for name in changes.exists.column_names:
        codes = changes.exists.column(name)
        expected = pc.if_else(pc.equal(ops, EVENT_INSERT), NEW,
                              pc.if_else(pc.equal(ops, EVENT_DELETE), OLD, BOTH)).cast(pa.int8())
        if not pc.all(pc.equal(codes, expected)).as_py():
            return False
    return True


# ---- ranges (the `changes` command) -------------------------------------------------------------

def _kind(storage: Storage, prefix: str, version: int) -> str:
    try:
        return str(json.loads(storage.read_bytes(f"{layout.changes_dir(prefix, version)}/{CHANGES_JSON}"))["kind"])
    except FileNotFoundError:
        raise MissingChanges(f"version {version} has no change files (they were off when it was written)") from None


def read_range(storage: Storage, prefix: str, first: int, last: int) -> list[VersionChanges]:
    return [read_version(storage, prefix, v) for v in range(first, last + 1)]


def net_between(storage: Storage, prefix: str, start: int, end: int) -> tuple[ChangeEvents, TableDef]:
    """The net changes that take the table from version `start` to version `end`: one event per key."""
    versions = read_range(storage, prefix, start + 1, end)
    if not versions:
        raise MissingChanges(f"no versions after {start} up to {end}")
    table = versions[-1].table
    if all(v.kind == KIND_ROWS and is_full(v) for v in versions):  # collapse: first before image, last after image
        first: dict[str, Row] = {}
        last: dict[str, Row | None] = {}
        for v in versions:
            ops = v.events.op.to_pylist()
            befores, afters = v.events.before.to_pylist(), v.events.after.to_pylist()
            for key_b, key_a, op, b, a in zip(_keys(v.events.before, table), _keys(v.events.after, table), ops,
                                              befores, afters, strict=True):
                key = key_a if op == EVENT_INSERT else key_b
                if key not in last and op != EVENT_INSERT:
                    first[key] = b
                last[key] = None if op == EVENT_DELETE else a
        return net_events(first, {k: r for k, r in last.items() if r is not None}, set(last), table), table
    # a snapshot in the range, or minimal images: replay from the latest snapshot at or before `start`
    # (version 0 is the table before it existed: empty)
    origin = start
    while origin > 0 and _kind(storage, prefix, origin) == KIND_ROWS:
        origin -= 1
    if origin == 0 and start > 0:
        raise MissingChanges(f"no snapshot at or before version {start} to replay from")
    state: dict[str, Row] = {}
    for v in read_range(storage, prefix, origin, start) if start else []:
        apply(state, v)
    at_start = dict(state)
    touched: set[str] = set()
    for v in versions:
        touched |= apply(state, v)
        if v.kind != KIND_ROWS:
            touched |= set(at_start)
    return net_events(at_start, state, touched, table), table
