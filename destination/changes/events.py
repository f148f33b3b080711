"""Row-level change events of one version, computed inside the task that merges the rows.

A version's changes are net per row: every primary-key value (for history tables the key
with `_fivetran_start`, i.e. one version row) appears at most once, as
  I  inserted: after image only,
  U  updated: before and after images,
  D  deleted: before image only,
so the events of one version can be applied in any order. Images hold the table's columns
(not `_destination_meta`, the destination's own bookkeeping).

Tasks pass the merge's before rows (stored rows it replaced or removed) and after rows
(rows it wrote) to `pair_changes`; rows that did not change at all are never events, and
rows whose only change is `_fivetran_synced` (no-op upserts) are left out unless asked for.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from destination.model.keys import key_tokens
from destination.model.table_model import SYNCED, TableDef
from destination.model.type_mapping import arrow_schema

EVENT_INSERT, EVENT_UPDATE, EVENT_DELETE = "I", "U", "D"
EVENT_SNAPSHOT = "S"  # read back from a snapshot directory: the row as of the version (after image only)
_OP = "\x00op"
_BEFORE = "\x00before:"
_AFTER = "\x00after:"


def data_schema(table_def: TableDef) -> pa.Schema:
    """The columns of a change image: the table's columns without `_destination_meta`."""
    return arrow_schema(table_def.columns, with_meta=False)


def data_columns(table: pa.Table, table_def: TableDef) -> pa.Table:
    schema = data_schema(table_def)
    return table.select(schema.names).cast(schema)


@dataclass
class ChangeEvents:
    op: pa.Array  # I / U / D
    before: pa.Table  # data_schema; all NULL for inserts
    after: pa.Table  # data_schema; all NULL for deletes

    @property
    def count(self) -> int:
        return len(self.op)

    def counts(self) -> dict[str, int]:
        ops = self.op.to_numpy(zero_copy_only=False)
        return {"insert": int((ops == EVENT_INSERT).sum()), "update": int((ops == EVENT_UPDATE).sum()),
                "delete": int((ops == EVENT_DELETE).sum())}

    def to_ipc(self) -> bytes:
        arrays = [self.op, *self.before.columns, *self.after.columns]
        names = [_OP, *(_BEFORE + n for n in self.before.column_names), *(_AFTER + n for n in self.after.column_names)]
        table = pa.Table.from_arrays(arrays, names=names)
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes()

    @staticmethod
    def from_ipc(data: bytes | pa.Buffer) -> ChangeEvents:
        table = ipc.open_file(pa.BufferReader(data)).read_all()
        before = [n for n in table.column_names if n.startswith(_BEFORE)]
        after = [n for n in table.column_names if n.startswith(_AFTER)]
        return ChangeEvents(table.column(_OP).combine_chunks(),
                            table.select(before).rename_columns([n[len(_BEFORE):] for n in before]),
                            table.select(after).rename_columns([n[len(_AFTER):] for n in after]))


def empty_events(table_def: TableDef) -> ChangeEvents:
    schema = data_schema(table_def)
    return ChangeEvents(pa.array([], pa.string()), schema.empty_table(), schema.empty_table())


def concat_events(parts: list[ChangeEvents], table_def: TableDef) -> ChangeEvents:
    parts = [p for p in parts if p.count]
    if not parts:
        return empty_events(table_def)
    return ChangeEvents(pa.concat_arrays([p.op for p in parts]), pa.concat_tables([p.before for p in parts]),
                        pa.concat_tables([p.after for p in parts]))


def _nulls(schema: pa.Schema, n: int) -> pa.Table:
    return pa.Table.from_arrays([pa.nulls(n, f.type) for f in schema], schema=schema)


def deletes(rows: pa.Table, table_def: TableDef) -> ChangeEvents:
    before = data_columns(rows, table_def)
    return ChangeEvents(pa.array([EVENT_DELETE] * rows.num_rows, pa.string()), before,
                        _nulls(before.schema, rows.num_rows))


def updates(before: pa.Table, after: pa.Table, table_def: TableDef) -> ChangeEvents:
    """Row i of `before` became row i of `after` (the caller knows they changed)."""
    return ChangeEvents(pa.array([EVENT_UPDATE] * before.num_rows, pa.string()), data_columns(before, table_def),
                        data_columns(after, table_def))


def equal_rows(before: pa.Table, after: pa.Table, ignore: tuple[str, ...] = ()) -> np.ndarray:
    """Per row: every column equal (NULL equals NULL), ignoring the named columns."""
    same = np.ones(before.num_rows, dtype=bool)
    for name in before.column_names:
        if name in ignore:
            continue
        b, a = before.column(name), after.column(name)
        eq = pc.or_kleene(pc.equal(b, a), pc.and_(pc.is_null(b), pc.is_null(a)))
        same &= pc.fill_null(eq, False).to_numpy(zero_copy_only=False)
    return same


@dataclass
class PairedChanges:
    events: ChangeEvents
    noop_updates: int  # updates left out because only `_fivetran_synced` changed


def pair_changes(before: pa.Table, after: pa.Table, table_def: TableDef, emit_noop_updates: bool) -> PairedChanges:
    """Net events from the rows a merge replaced or removed (`before`) and the rows it wrote (`after`),
    matched by primary key: both → U, before only → D, after only → I. Ordered D, U, I."""
    before, after = data_columns(before, table_def), data_columns(after, table_def)
    key = [c for c in table_def.columns if c.name in table_def.key_columns]
    b_keys = key_tokens(before, key) if before.num_rows else pa.array([], pa.string())
    a_keys = key_tokens(after, key) if after.num_rows else pa.array([], pa.string())
    match = pc.index_in(b_keys, value_set=a_keys)  # per before row: its after row, or NULL
    matched = pc.is_valid(match).to_numpy(zero_copy_only=False)
    inserted = ~pc.is_in(a_keys, value_set=b_keys).to_numpy(zero_copy_only=False)
    pre = before.filter(pa.array(matched))
    post = after.take(pc.drop_null(match))
    unchanged = equal_rows(pre, post)
    synced_only = equal_rows(pre, post, ignore=(SYNCED,)) & ~unchanged
    keep = ~unchanged if emit_noop_updates else ~(unchanged | synced_only)
    noops = 0 if emit_noop_updates else int(synced_only.sum())
    parts = [deletes(before.filter(pa.array(~matched)), table_def),
             updates(pre.filter(pa.array(keep)), post.filter(pa.array(keep)), table_def)]
    new_rows = after.filter(pa.array(inserted))
    parts.append(ChangeEvents(pa.array([EVENT_INSERT] * new_rows.num_rows, pa.string()),
                              _nulls(new_rows.schema, new_rows.num_rows), new_rows))
    return PairedChanges(concat_events(parts, table_def), noops)

