"""Decoded batch files → one operations table (the merge jobs' input).

Rows are numbered in request order: (history tables: earliest-start files first,)
replace files, then update files, then delete files, each in list order and rows
in file order (fivetran-protocol §10.1, §10.2).
A column missing from a file, or holding the unmodified marker, is flagged
unmodified: it keeps the stored value (NULL for a new row).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from destination.batch.reader import DecodedBatch, FileFormat, iter_batch_file
from destination.conversion import Failure, changes_column, count_by_column
from destination.errors import BadBatchFile
from destination.table_model import START, TableDef
from destination.type_mapping import arrow_type
from spark_jobs.keys import buckets, key_tokens
from spark_jobs.merge import BUCKET, CHANGES, DELETE, EARLIEST, KEY, OP, REPLACE, SEQ, UNMOD, UPDATE, key_columns

KINDS = (("earliest", EARLIEST), ("replace", REPLACE), ("update", UPDATE), ("delete", DELETE))


@dataclass
class Operations:
    table: pa.Table  # typed columns + OP, SEQ, CHANGES, UNMOD flags, KEY, BUCKET
    batch_id: str  # digest of every file's bytes and role: identifies a retried request
    failures_by_column: dict[str, int] = field(default_factory=dict)
    files: int = 0

    @property
    def rows(self) -> int:
        return self.table.num_rows


def _block_to_ops(block: DecodedBatch, table_def: TableDef, op: int, seq_start: int) -> pa.Table:
    n = block.table.num_rows
    arrays: list[pa.Array] = []
    names: list[str] = []
    flags: list[pa.Array] = []
    for col in table_def.columns:
        names.append(col.name)
        present = col.name in block.table.column_names and op != DELETE
        if col.name in block.table.column_names:
            arrays.append(block.table.column(col.name).combine_chunks())
        else:
            arrays.append(pa.nulls(n, arrow_type(col)))
        if not present:
            flags.append(pa.array(np.ones(n, dtype=bool)))
        elif col.name in block.unmodified:
            flags.append(block.unmodified[col.name])
        else:
            flags.append(pa.array(np.zeros(n, dtype=bool)))
    arrays += [pa.array(np.full(n, op, dtype=np.int8)), pa.array(np.arange(seq_start, seq_start + n, dtype=np.int64)),
               changes_column(block.failures, n), *flags]
    names += [OP, SEQ, CHANGES, *(UNMOD + c.name for c in table_def.columns)]
    return pa.Table.from_arrays(arrays, names=names)


def build_operations(table_def: TableDef, files: dict[str, list[str]], keys: dict[str, bytes],
                     fmt: FileFormat) -> Operations:
    digest = hashlib.sha256()
    parts: list[pa.Table] = []
    failures: list[Failure] = []
    seq = 0
    kcols = key_columns(table_def)  # history tables: the key without _fivetran_start
    count = 0
    for kind, op in KINDS:
        required = [c.name for c in kcols]
        if table_def.is_history and op != DELETE:
            required.append(START)  # a version's start is its identity; a delete closes whatever is active
        for path in files.get(kind, []):
            count += 1
            digest.update(f"{kind}\x00{os.path.basename(path)}\x00".encode())
            for block in iter_batch_file(path, list(table_def.columns), fmt, keys.get(path), required, digest):
                if block.table.num_rows == 0:
                    continue
                missing_key = [c for c in required if block.table.column(c).null_count]
                if missing_key:
                    raise BadBatchFile(path, f"NULL or unconvertible value in key column(s) {missing_key}")
                parts.append(_block_to_ops(block, table_def, op, seq))
                seq += block.table.num_rows
                failures.extend(block.failures)
    if parts:
        ops = pa.concat_tables(parts)
    else:
        ops = _block_to_ops(DecodedBatch(pa.table({})), table_def, REPLACE, 0).slice(0, 0)
    tokens = key_tokens(ops, kcols) if ops.num_rows else pa.array([], pa.string())
    ops = ops.append_column(KEY, tokens).append_column(BUCKET, pa.array(buckets(tokens, table_def.bucket_count)))
    return Operations(ops, digest.hexdigest(), count_by_column(failures), count)
