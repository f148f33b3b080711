"""Primary-key tokens and key-hash buckets.

A key token is a canonical string of a row's key, compared in the column's type:
FLOAT through float32, DECIMAL at its fixed scale, timestamps as exact microseconds.
Composite keys join length-prefixed parts so no value can imitate a separator.
Buckets use pandas' stable SipHash (fixed key) of the token: the layout depends on
it, so it must never change for an existing table (`_table.json` records the bucket count).
Shared: the merge tasks, the change files and the driver (a key change) all use it.
"""
from __future__ import annotations

import base64

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from destination.table_model import ColumnDef
from destination.type_mapping import arrow_type

NULL_TOKEN = "\x00"


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


def key_hashes(tokens: pa.Array) -> np.ndarray:
    """64-bit hashes of key tokens (equal keys, equal hashes); the bucket is the hash modulo the bucket count."""
    if len(tokens) == 0:
        return np.zeros(0, dtype=np.uint64)
    return pd.util.hash_array(np.asarray(tokens.to_numpy(zero_copy_only=False), dtype=object), categorize=False)


def buckets_of(hashes: np.ndarray, bucket_count: int) -> np.ndarray:
    return (hashes % np.uint64(bucket_count)).astype(np.int32)


def buckets(tokens: pa.Array, bucket_count: int) -> np.ndarray:
    return buckets_of(key_hashes(tokens), bucket_count)
