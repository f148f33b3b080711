"""The history-mode merge of one key range, pure Arrow: apply one WriteHistoryBatch to the range's versions.

A history table keeps every version of a row; the entity key is the primary key
without `_fivetran_start` (spark_jobs.merge.key_columns). One request applies, in
this order (fivetran-protocol §5 WriteHistoryBatch, §10.2, §10.4, §10.9):

1. earliest (OP=OP_EARLIEST, one row per key with the request's smallest start s):
   versions of the key with start >= s are removed; a remaining version still open at
   s (the active one, or one whose end reaches s) is closed at s - 1 ms.
2. replace and update rows together, per key in `_fivetran_start` order: each becomes
   a new version with the start, end and active of its row. An update row fills the
   columns it leaves unmodified from the version just before it (stored, or from this
   request); an update of a key with no earlier version inserts nothing. A version
   whose (key, start) already exists replaces it (the primary key stays unique).
3. the versions of every key that got new ones are chained: each but the last is
   inactive and ends no later than the next start minus 1 ms (a no-op for the
   tester's own end values, a guarantee for anything else).
4. deletes: the key's active version becomes inactive with the delete row's
   `_fivetran_end` (its `_fivetran_synced` when the end is missing) and synced.

Timestamps are compared and shifted as int64 microseconds, so 1 ms is exactly 1000
and nothing rounds.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.model import row_meta
from destination.model.keys import key_tokens, run_start_index, run_starts
from destination.model.table_model import ACTIVE, DESTINATION_META, END, START, SYNCED, TableDef
from destination.model.type_mapping import arrow_schema
from spark_jobs.merge import MergeCounts, MergeResult, key_columns, occurrence
from spark_jobs.operations import CHANGES, KEY, OP, OP_DELETE, OP_EARLIEST, OP_REPLACE, OP_UPDATE, SEQ, UNMOD

TMAX_US = 253402300799999000  # 9999-12-31T23:59:59.999Z, the end of an active version
ONE_MS_US = 1000
_ROW = "\x00row"  # position of a stored row in the range's input (NULL for a new version)
_TS = pa.timestamp("us", tz="UTC")


def _col(table: pa.Table, name: str) -> pa.Array:
    return table.column(name).combine_chunks()


def _np(table: pa.Table, name: str) -> np.ndarray:
    return _col(table, name).to_numpy(zero_copy_only=False)


def micros(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Epoch microseconds as int64; NULL becomes TMAX (an end that was never set is open)."""
    as_int = values.cast(_TS).cast(pa.int64())
    return pc.fill_null(as_int, TMAX_US).to_numpy(zero_copy_only=False).astype(np.int64)


def timestamps(values: np.ndarray) -> pa.Array:
    """UTC timestamps from epoch microseconds."""
    return pa.array(values, pa.int64()).cast(_TS)


def set_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.column_names.index(name), name, values.cast(table.schema.field(name).type))


def restamp(table: pa.Table, mask: np.ndarray, version: int) -> pa.Table:
    """Mark rows this version rewrote: `_destination_meta.version` becomes `version`, changes kept."""
    if not mask.any():
        return table
    meta = table.column(DESTINATION_META).combine_chunks()
    return set_column(table, DESTINATION_META, row_meta.restamp(meta, mask, version))


class _Versions:
    """The range's versions while the request applies; `_ROW` tracks which stored rows changed."""

    def __init__(self, stored: pa.Table, table_def: TableDef, version: int) -> None:
        self.table_def = table_def
        self.version = version
        self.schema = arrow_schema(table_def.columns)
        self.kcols = key_columns(table_def)
        self.stored = stored.select(self.schema.names).cast(self.schema) if stored.num_rows else self.schema.empty_table()
        self.state = self.stored.append_column(_ROW, pa.array(np.arange(self.stored.num_rows), pa.int64()))
        self.keys = self._tokens(self.state)
        self.changed = np.zeros(self.stored.num_rows, dtype=bool)  # by stored row: rewritten or removed
        self.counts = MergeCounts()

    def _tokens(self, table: pa.Table) -> pa.Array:
        return key_tokens(table, self.kcols) if table.num_rows else pa.array([], pa.string())

    def _active(self) -> np.ndarray:
        return pc.fill_null(_col(self.state, ACTIVE), False).to_numpy(zero_copy_only=False)

    def _is_stored(self) -> np.ndarray:
        return pc.is_valid(_col(self.state, _ROW)).to_numpy(zero_copy_only=False)

    def _mark(self, mask: np.ndarray) -> None:
        rows = pc.filter(self.state.column(_ROW), pa.array(mask)).drop_null().to_numpy()
        self.changed[rows] = True

    def _keep(self, keep: np.ndarray) -> None:
        self._mark(~keep)
        self.state = self.state.filter(pa.array(keep))
        self.keys = pc.filter(self.keys, pa.array(keep))

    def _close(self, mask: np.ndarray, end_us: np.ndarray) -> None:
        """Rows in `mask` become inactive, ending at `end_us` (already per row)."""
        if not mask.any():
            return
        self._mark(mask)
        ends = np.where(mask, end_us, micros(self.state.column(END)))
        self.state = set_column(self.state, END, timestamps(ends))
        self.state = set_column(self.state, ACTIVE, pc.if_else(pa.array(mask), False, self.state.column(ACTIVE)))
        self.state = restamp(self.state, mask, self.version)

    # ---- 1. earliest ----------------------------------------------------------------------

    def earliest(self, rows: pa.Table) -> None:
        if not rows.num_rows or not self.state.num_rows:
            return
        grouped = pa.table({"k": rows.column(KEY), "s": rows.column(START).cast(_TS).cast(pa.int64())}) \
            .group_by("k").aggregate([("s", "min")])
        idx = pc.index_in(self.keys, value_set=_col(grouped, "k"))
        hit = pc.is_valid(idx).to_numpy(zero_copy_only=False)
        if not hit.any():
            return
        first = np.where(hit, pc.take(grouped.column("s_min"), idx).fill_null(0).to_numpy(zero_copy_only=False), 0)
        starts = micros(self.state.column(START))
        remove = hit & (starts >= first)
        self.counts.deleted += int(remove.sum())
        self._keep(~remove)
        hit, first = hit[~remove], first[~remove]
        active = self._active()
        close = hit & (active | (micros(self.state.column(END)) >= first))
        self.counts.updated += int((close & self._is_stored()).sum())
        self._close(close, np.minimum(micros(self.state.column(END)), first - ONE_MS_US))

    # ---- 2. replace and update rows, by start ---------------------------------------------

    def insert(self, rows: pa.Table) -> pa.Array:
        """Add the request's versions; returns the keys that got new versions."""
        if not rows.num_rows:
            return pa.array([], pa.string())
        names = [c.name for c in self.table_def.columns]
        prior_mask = pc.is_in(self.keys, value_set=_col(rows, KEY))
        if not pc.any(prior_mask).as_py() and pc.count_distinct(_col(rows, KEY)).as_py() == rows.num_rows:
            return self._first_versions(rows, names)
        prior = self.state.filter(prior_mask)
        n_prior, n_new = prior.num_rows, rows.num_rows
        combined = pa.concat_tables([prior.select(names), rows.select(names)])
        origin = np.concatenate([np.zeros(n_prior, dtype=np.int8), np.ones(n_new, dtype=np.int8)])
        seq = np.concatenate([np.full(n_prior, -1, dtype=np.int64), _np(rows, SEQ)])
        keys = pa.concat_arrays([pc.filter(self.keys, prior_mask), _col(rows, KEY)])
        order = pc.sort_indices(pa.table({"k": keys, "s": combined.column(START).cast(_TS), "o": origin, "q": seq}),
                                sort_keys=[("k", "ascending"), ("s", "ascending"), ("o", "ascending"), ("q", "ascending")])
        combined = combined.take(order)
        keys = pc.take(keys, order)
        origin, seq = origin[order.to_numpy()], seq[order.to_numpy()]
        ops = np.concatenate([np.full(n_prior, OP_REPLACE, dtype=np.int8), _np(rows, OP)])[order.to_numpy()]
        changes = pa.concat_arrays([pa.nulls(n_prior, pa.string()), _col(rows, CHANGES)]).take(order)
        n = combined.num_rows
        idx = np.arange(n)
        group_start = run_start_index(keys)
        full = ops == OP_REPLACE  # stored versions and replace rows carry every column
        has_earlier = np.maximum.accumulate(np.where(full, idx, -1)) >= group_start
        is_new = origin == 1
        dropped = is_new & (ops == OP_UPDATE) & ~has_earlier
        self.counts.ignored += int(dropped.sum())
        filled = []
        for name in names:
            unmod = np.concatenate([np.zeros(n_prior, dtype=bool),
                                    _np(rows, UNMOD + name)])[order.to_numpy()]
            source = np.maximum.accumulate(np.where(unmod & (ops == OP_UPDATE), -1, idx))
            filled.append(combined.column(name).combine_chunks().take(pa.array(np.maximum(source, 0))))
        combined = pa.Table.from_arrays(filled, names=names)
        # a later row with the same (key, start) wins, stored or new; the last of each run survives
        starts = micros(combined.column(START))
        same_next = np.zeros(n, dtype=bool)
        same_next[:-1] = ~run_starts(keys)[1:] & (starts[1:] == starts[:-1])
        survivors = is_new & ~dropped & ~same_next
        superseded_prior = ~is_new & same_next  # stored versions replaced by a request row of the same start
        new_rows = combined.filter(pa.array(survivors))
        new_rows = _fill_open_versions(new_rows)
        meta = row_meta.column(self.version, changes.filter(pa.array(survivors)))
        new_rows = new_rows.append_column(DESTINATION_META, meta).append_column(_ROW, pa.nulls(new_rows.num_rows, pa.int64()))
        # stored rows in `prior` sorted the same way: find their positions in state to drop the superseded ones
        sorted_prior = pc.take(pa.concat_arrays([_col(prior, _ROW), pa.nulls(n_new, pa.int64())]), order)
        gone = pc.filter(sorted_prior, pa.array(superseded_prior)).drop_null()
        if len(gone):
            self.counts.updated += len(gone)
            self.counts.inserted -= len(gone)
            self._keep(pc.invert(pc.is_in(self.state.column(_ROW), value_set=gone)).fill_null(True)
                       .to_numpy(zero_copy_only=False))
        self.counts.inserted += new_rows.num_rows
        self.state = pa.concat_tables([self.state, new_rows.select(self.state.column_names).cast(self.state.schema)])
        self.keys = pa.concat_arrays([self.keys, pc.filter(keys, pa.array(survivors))])
        return pc.unique(pc.filter(keys, pa.array(survivors)))

    def _first_versions(self, rows: pa.Table, names: list[str]) -> pa.Array:
        """The general rules for keys with no stored version and one row each (an initial load): a replace row
        is the key's first version; an update row has no version before it and inserts nothing."""
        is_replace = pc.equal(_col(rows, OP), OP_REPLACE)
        self.counts.ignored += rows.num_rows - (pc.sum(is_replace).as_py() or 0)
        rows = rows.filter(is_replace)
        new_rows = _fill_open_versions(rows.select(names))
        new_rows = new_rows.append_column(DESTINATION_META, row_meta.column(self.version, _col(rows, CHANGES))) \
            .append_column(_ROW, pa.nulls(new_rows.num_rows, pa.int64()))
        self.counts.inserted += new_rows.num_rows
        self.state = pa.concat_tables([self.state, new_rows.select(self.state.column_names).cast(self.state.schema)])
        keys = _col(rows, KEY)
        self.keys = pa.concat_arrays([self.keys, keys])
        return keys

    # ---- 3. chain the versions of the keys that changed --------------------------------------

    def chain(self, touched: pa.Array) -> None:
        if not len(touched) or pc.count_distinct(self.keys).as_py() == len(self.keys):
            return  # no key has two versions: nothing to chain
        order = pc.sort_indices(pa.table({"k": self.keys, "s": self.state.column(START).cast(_TS)}),
                                sort_keys=[("k", "ascending"), ("s", "ascending")]).to_numpy()
        keys = pc.take(self.keys, pa.array(order))
        n = len(order)
        has_next = np.zeros(n, dtype=bool)
        has_next[:-1] = ~run_starts(keys)[1:]
        in_touched = pc.is_in(keys, value_set=touched).to_numpy(zero_copy_only=False)
        starts = micros(self.state.column(START))[order]
        ends = micros(self.state.column(END))[order]
        active = self._active()[order]
        next_start = np.concatenate([starts[1:], [TMAX_US]])
        limit = next_start - ONE_MS_US
        fix_sorted = in_touched & has_next & (active | (ends > limit))
        fix = np.zeros(n, dtype=bool)
        fix[order] = fix_sorted
        new_end = np.empty(n, dtype=np.int64)
        new_end[order] = np.minimum(ends, limit)
        stored = self._is_stored()
        self.counts.updated += int((fix & stored).sum())
        self._close(fix, new_end)

    # ---- 4. deletes ----------------------------------------------------------------------

    def delete(self, rows: pa.Table) -> None:
        if not rows.num_rows:
            return
        first = rows.filter(pa.array(occurrence(_col(rows, KEY), _col(rows, SEQ)) == 0))
        ends = pc.coalesce(first.column(END).cast(_TS), first.column(SYNCED).cast(_TS))
        idx = pc.index_in(self.keys, value_set=_col(first, KEY))
        active = self._active()
        close = pc.is_valid(idx).to_numpy(zero_copy_only=False) & active
        closed_keys = pc.unique(pc.filter(self.keys, pa.array(close)))
        self.counts.ignored += first.num_rows - len(closed_keys)
        if not close.any():
            return
        self.counts.updated += int(close.sum())
        safe = pc.fill_null(idx, 0)
        self._close(close, micros(pc.take(ends, safe)))
        synced = pc.take(first.column(SYNCED).cast(_TS), safe)
        self.state = set_column(self.state, SYNCED, pc.if_else(pa.array(close), pc.coalesce(synced, self.state.column(SYNCED)),
                                                         self.state.column(SYNCED)))

    def result(self, track_changes: bool) -> MergeResult:
        table = self.state.drop_columns([_ROW])
        if not track_changes:
            return MergeResult(table, self.counts)
        rows = _col(self.state, _ROW)
        stored = pc.is_valid(rows).to_numpy(zero_copy_only=False)
        written = ~stored  # new versions, and stored ones this request changed
        written[stored] = self.changed[pc.fill_null(rows, 0).to_numpy()[stored]]
        return MergeResult(table, self.counts, self.stored.filter(pa.array(self.changed)), table.filter(pa.array(written)))


def _fill_open_versions(rows: pa.Table) -> pa.Table:
    """A version without `_fivetran_end` is open (TMAX); without `_fivetran_active`, it is active iff open."""
    ends = micros(rows.column(END))
    rows = set_column(rows, END, timestamps(ends))
    return set_column(rows, ACTIVE, pc.coalesce(rows.column(ACTIVE), pa.array(ends == TMAX_US)))


def merge_history_rows(stored: pa.Table, ops: pa.Table, table_def: TableDef, version: int,
                         track_changes: bool = False) -> MergeResult:
    """Apply one request's history operations (one key range) to the range's stored versions that may be affected.

    Every step works per key, so only the versions of the request's keys take part; the others are carried
    through as they are (in a large range they are nearly all of it, and each step copies what takes
    part)."""
    involved, untouched = _split_by_keys(stored, ops, table_def)
    versions = _Versions(involved, table_def, version)
    op = ops.column(OP)
    versions.earliest(ops.filter(pc.equal(op, OP_EARLIEST)))
    touched = versions.insert(ops.filter(pc.or_(pc.equal(op, OP_REPLACE), pc.equal(op, OP_UPDATE))))
    versions.chain(touched)
    versions.delete(ops.filter(pc.equal(op, OP_DELETE)))
    result = versions.result(track_changes)
    if not untouched.num_rows:
        return result
    carried = untouched.select(versions.schema.names).cast(versions.schema)
    return replace(result, table=pa.concat_tables([carried, result.table]))


def _split_by_keys(stored: pa.Table, ops: pa.Table, table_def: TableDef) -> tuple[pa.Table, pa.Table]:
    """(the stored versions of keys the request names, the others)."""
    if not stored.num_rows:
        return stored, stored
    named = pc.is_in(key_tokens(stored, key_columns(table_def)), value_set=ops.column(KEY).combine_chunks())
    return stored.filter(named), stored.filter(pc.invert(named))
