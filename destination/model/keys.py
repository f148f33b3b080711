"""Primary-key tokens: what merges and change files match rows on.

A key token is a canonical string of a row's key, compared in the column's type:
FLOAT through float32, DECIMAL at its fixed scale, timestamps as exact microseconds.
Composite keys join length-prefixed parts so no value can imitate a separator.
Where rows are placed is decided by key order (destination.model.key_order), not by tokens.
"""
from __future__ import annotations

import base64

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.model.table_model import ColumnDef
from destination.model.type_mapping import arrow_type

NULL_TOKEN = "\x00"
_INTEGERS = ("SHORT", "INT", "LONG")


def _part(values: pa.Array, col: ColumnDef) -> pa.Array:
    values = values.cast(arrow_type(col))
    t = values.type
    if pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_date(t):
        text = values.cast(pa.int64() if not pa.types.is_date32(t) else pa.int32()).cast(pa.string())
    elif pa.types.is_binary(t):
        text = pa.array([None if v is None else base64.b64encode(v).decode() for v in values.to_pylist()], pa.string())
    elif pa.types.is_floating(t):
        # -0.0 equals 0.0 as a key
        text = pc.if_else(pc.equal(values, 0), pa.scalar(0, t), values).cast(pa.string())
    else:
        text = values.cast(pa.string())
    return pc.fill_null(text, NULL_TOKEN)


def key_tokens(table: pa.Table, key_columns: list[ColumnDef]) -> pa.Array:
    parts = [_part(table.column(c.name).combine_chunks(), c) for c in key_columns]
    if len(parts) == 1:
        return parts[0]
    pieces: list[pa.Array | str] = []
    for p in parts:
        pieces.extend([pc.utf8_length(p).cast(pa.string()), ":", p])
    return pc.binary_join_element_wise(*pieces, "|")


def matched_keys(stored: pa.Table, operations: pa.Table, operation_tokens: pa.Array | pa.ChunkedArray,
                 key_columns: list[ColumnDef]) -> tuple[pa.Array, pa.Array]:
    """The stored rows' and the operations' keys in one form to match them by: int64 when the key is one integer
    column without NULLs on either side (equal integers are equal key tokens, and matching them costs a fraction of
    matching their text: in a uniform change's merge, turning 700,000 stored integer keys into text was a twentieth
    of the task), else the key tokens (the operations' as already computed, `operation_tokens`)."""
    if len(key_columns) == 1 and key_columns[0].type in _INTEGERS:
        columns = [stored.column(key_columns[0].name), operations.column(key_columns[0].name)]
        if not any(c.null_count for c in columns):
            stored_keys, operation_keys = (c.cast(pa.int64()).combine_chunks() for c in columns)
            return stored_keys, operation_keys
    tokens = key_tokens(stored, key_columns) if stored.num_rows else pa.array([], pa.string())
    if isinstance(operation_tokens, pa.ChunkedArray):
        operation_tokens = operation_tokens.combine_chunks()
    return tokens, operation_tokens


def bisected(stored: pa.Array, wanted: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """For `matched_keys`' int64 keys, `stored` in strictly increasing order (a data file's, written in key order):
    where each wanted key lies in `stored` and whether it is there, found by bisection; None for other keys (the
    caller hashes them). 7,000 wanted keys among 757,000 stored ones: 1.3 ms, against 11 ms for `pc.is_in`, which
    hashes the wanted keys and probes every stored one (measured)."""
    if not (pa.types.is_int64(stored.type) and pa.types.is_int64(wanted.type)) or not len(stored) \
            or stored.null_count or wanted.null_count:
        return None
    have, want = stored.to_numpy(), wanted.to_numpy()
    if not bool(np.all(have[1:] > have[:-1])):
        return None
    at = np.minimum(np.searchsorted(have, want), len(have) - 1)
    return at, have[at] == want


def run_starts(sorted_keys: pa.Array) -> np.ndarray:
    """For keys in sorted order: True where a run of equal keys begins."""
    n = len(sorted_keys)
    first = np.ones(n, dtype=bool)
    if n > 1:
        first[1:] = pc.not_equal(sorted_keys.slice(1), sorted_keys.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return first


def run_start_index(sorted_keys: pa.Array) -> np.ndarray:
    """For keys in sorted order: the index of the first row of each row's run."""
    return np.maximum.accumulate(np.where(run_starts(sorted_keys), np.arange(len(sorted_keys)), 0))
